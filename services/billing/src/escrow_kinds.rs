//! The names reservation postings go by: their ledger kinds and the lines
//! they make on invoices and statements. Shared by the escrow module, which
//! writes them, and the invoice and statement runs, which read them (a
//! module of its own so neither imports the other for it).

/// Posting kinds of reservations (`billing.transactions.kind`).
pub(crate) const RESERVATION: &str = "reservation";
pub(crate) const ESCROW_RELEASE: &str = "escrow_release";
pub(crate) const ESCROW_REFUND: &str = "escrow_refund";
pub(crate) const ESCROW_PENALTY: &str = "escrow_penalty";
pub(crate) const RESALE: &str = "resale";

/// The line a posting makes on its renter's invoice (the invoice line's
/// meter), and on its host's statement (`reservation`).
pub mod line {
    pub const PURCHASE: &str = "reservation";
    pub const REFUND: &str = "reservation_refund";
    pub const PENALTY: &str = "reservation_penalty";
    pub const RESALE_PURCHASE: &str = "resale_purchase";
    pub const RESALE_SALE: &str = "resale_sale";
}

/// The kinds above as an SQL list, for the invoice run's queries.
pub(crate) const KINDS_SQL: &str =
    "'reservation', 'escrow_release', 'escrow_refund', 'escrow_penalty', 'resale'";

/// Whether an invoice or statement line of `meter` is a reservation's.
pub fn is_reservation_line(meter: &str) -> bool {
    matches!(
        meter,
        line::PURCHASE | line::REFUND | line::PENALTY | line::RESALE_PURCHASE | line::RESALE_SALE
    )
}

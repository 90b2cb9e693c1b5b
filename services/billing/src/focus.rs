//! An invoice's usage as CSV in FinOps FOCUS 1.0 columns, one row per
//! invoice line, so that a FinOps tool can load it beside other clouds' cost
//! exports. The costs are the invoice's own (rounded) line amounts, and
//! each credit note against the invoice is a `Credit` row of the negative
//! amount: the `BilledCost` column adds up to the invoice total less its
//! credit notes exactly (what the renter was finally charged). A reserved
//! block's lines are `Purchase` and `Credit` rows with FOCUS's commitment
//! columns (`CommitmentDiscountId` = the reservation).

use chrono::{DateTime, SecondsFormat, Utc};
use contracts::{api, meters, money};
use rust_decimal::Decimal;

/// Who provides, publishes and invoices the service.
pub const PROVIDER: &str = "gpumarket";
/// A rental is a GPU machine by the second, which FOCUS files under compute.
pub const SERVICE_CATEGORY: &str = "Compute";
pub const SERVICE_NAME: &str = "GPU Instances";

/// What FOCUS calls a reserved block: a commitment paid up front, in
/// money (`CommitmentDiscountCategory` `Spend`).
pub const COMMITMENT_TYPE: &str = "Reserved block";
pub const COMMITMENT_CATEGORY: &str = "Spend";

/// The columns, in order (FOCUS 1.0 names).
pub const COLUMNS: [&str; 27] = [
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
    "ChargeDescription",
    "ConsumedQuantity",
    "ConsumedUnit",
    "PricingQuantity",
    "PricingUnit",
    "ListUnitPrice",
    "ResourceId",
    "ResourceName",
    "ServiceName",
    "ServiceCategory",
    "ProviderName",
    "PublisherName",
    "InvoiceIssuerName",
    "SubAccountId",
    "SkuId",
    "CommitmentDiscountId",
    "CommitmentDiscountType",
    "CommitmentDiscountCategory",
];

fn instant(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A field quoted when it holds a separator, a quote or a line break
/// (RFC 4180).
fn field(raw: &str) -> String {
    if raw.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", raw.replace('"', "\"\""))
    } else {
        raw.to_owned()
    }
}

/// The amount with exactly the currency's minor-unit digits (it is already
/// rounded there; this only fixes how it is written).
fn minor(amount: Decimal, currency: &str) -> String {
    let mut a = money::round_to_minor(amount, currency);
    a.rescale(money::minor_unit_digits(currency));
    a.to_string()
}

/// What differs between the rows of one invoice; the billing period,
/// currency, provider and sub-account columns are the invoice's.
struct Charge {
    cost: String,
    period: (DateTime<Utc>, DateTime<Utc>),
    category: &'static str,
    description: String,
    /// Consumed quantity and unit, pricing quantity and unit, list unit
    /// price; empty for a credit.
    quantities: [String; 5],
    resource: String,
    sku: String,
    /// The reserved block a row is about (its reservation id): the
    /// commitment columns.
    commitment: Option<String>,
}

fn push_row(out: &mut String, invoice: &api::Invoice, charge: Charge) {
    let [consumed, consumed_unit, pricing, pricing_unit, unit_price] = charge.quantities;
    let (commitment, commitment_type, commitment_category) = match charge.commitment {
        Some(id) => (
            id,
            COMMITMENT_TYPE.to_owned(),
            COMMITMENT_CATEGORY.to_owned(),
        ),
        None => Default::default(),
    };
    let row = [
        charge.cost.clone(),
        charge.cost.clone(),
        charge.cost,
        invoice.currency.clone(),
        instant(invoice.period_start),
        instant(invoice.period_end),
        instant(charge.period.0),
        instant(charge.period.1),
        charge.category.to_owned(),
        charge.description,
        consumed,
        consumed_unit,
        pricing,
        pricing_unit,
        unit_price,
        charge.resource.clone(),
        charge.resource,
        SERVICE_NAME.to_owned(),
        SERVICE_CATEGORY.to_owned(),
        PROVIDER.to_owned(),
        PROVIDER.to_owned(),
        PROVIDER.to_owned(),
        invoice.tenant_id.to_string(),
        charge.sku,
        commitment,
        commitment_type,
        commitment_category,
    ];
    let row: Vec<String> = row.iter().map(|f| field(f)).collect();
    out.push_str(&row.join(","));
    out.push_str("\r\n");
}

/// The invoice's lines as FOCUS rows, then its credit notes, with a header
/// line; CRLF line ends.
pub fn csv(invoice: &api::Invoice) -> String {
    let mut out = COLUMNS.join(",");
    out.push_str("\r\n");
    let currency = invoice.currency.as_str();
    for line in &invoice.lines {
        if crate::escrow_kinds::is_reservation_line(&line.meter) {
            push_row(&mut out, invoice, reservation_charge(line, currency));
            continue;
        }
        // Measured in the meter's unit (seconds, GiB-seconds, bytes), priced
        // per its pricing unit (hour, GiB-month, TB): the pricing quantity
        // is the quantity in pricing units (ListUnitPrice × PricingQuantity
        // equals ListCost up to its decimals and the line's one rounding).
        let pricing_quantity = meters::pricing_quantity(&line.meter, line.quantity);
        let (consumed_unit, pricing_unit, per) = match meters::pricing_unit(&line.meter) {
            "gib_month" => ("GiB-Seconds", "GiB-Months", "GiB-month"),
            "tb" => ("Bytes", "TB", "TB"),
            _ => ("Seconds", "Hours", "h"),
        };
        let mut description = format!(
            "{} usage of instance {} at {} {currency}/{per}",
            line.meter,
            line.instance_id,
            line.unit_price_per_hour.normalize()
        );
        if line.earlier_period {
            description.push_str(" (from an earlier period, reached the ledger after its invoice)");
        }
        push_row(
            &mut out,
            invoice,
            Charge {
                cost: minor(line.amount, currency),
                period: (line.charge_period_start, line.charge_period_end),
                category: "Usage",
                description,
                quantities: [
                    line.quantity.to_string(),
                    consumed_unit.to_owned(),
                    pricing_quantity.to_string(),
                    pricing_unit.to_owned(),
                    line.unit_price_per_hour.normalize().to_string(),
                ],
                resource: line.instance_id.to_string(),
                sku: line.meter.clone(),
                commitment: None,
            },
        );
    }
    for note in &invoice.credit_notes {
        // FOCUS: a credit is its own charge category, negative, with no
        // consumption, pricing or resource columns; it applies to the
        // invoice's billing period as a whole.
        push_row(
            &mut out,
            invoice,
            Charge {
                cost: minor(-note.amount, currency),
                period: (invoice.period_start, invoice.period_end),
                category: "Credit",
                description: format!("credit note {}: {}", note.number, note.reason),
                quantities: Default::default(),
                resource: String::new(),
                sku: String::new(),
                commitment: None,
            },
        );
    }
    out
}

/// A reserved block's invoice line as a FOCUS row: its purchase (or a
/// resale purchase) is a `Purchase` of the commitment, priced in GPU-hours
/// (no consumption: nothing is consumed by buying); refunds, the host's
/// penalty and a resale's proceeds are `Credit`s (negative). Every one
/// names the block in the commitment columns. The resource is the
/// reservation; its line's quantity is GPU-seconds.
fn reservation_charge(line: &api::InvoiceLine, currency: &str) -> Charge {
    use crate::escrow_kinds::line as kind;
    let id = line.instance_id.to_string();
    let gpu_hours = meters::pricing_quantity(meters::GPU, line.quantity);
    let price = line.unit_price_per_hour.normalize();
    let (category, description, priced) = match line.meter.as_str() {
        kind::PURCHASE => (
            "Purchase",
            format!(
                "reserved block {id}: {gpu_hours} GPU-hours at {price} {currency}/GPU-hour, paid up front"
            ),
            true,
        ),
        kind::RESALE_PURCHASE => (
            "Purchase",
            format!(
                "reserved block {id} bought on resale: {gpu_hours} GPU-hours at {price} {currency}/GPU-hour"
            ),
            true,
        ),
        kind::REFUND => (
            "Credit",
            format!(
                "reserved block {id}: {gpu_hours} GPU-hours refunded (the host silent or the block cancelled)"
            ),
            false,
        ),
        kind::PENALTY => (
            "Credit",
            format!("reserved block {id}: the host's penalty for cancelling"),
            false,
        ),
        _ => (
            "Credit",
            format!(
                "reserved block {id}: {gpu_hours} GPU-hours sold on resale, less the resale fee"
            ),
            false,
        ),
    };
    let quantities = if priced {
        [
            String::new(),
            String::new(),
            gpu_hours.to_string(),
            "GPU-Hours".to_owned(),
            price.to_string(),
        ]
    } else {
        Default::default()
    };
    Charge {
        cost: minor(line.amount, currency),
        period: (line.charge_period_start, line.charge_period_end),
        category,
        description,
        quantities,
        resource: id.clone(),
        sku: line.meter.clone(),
        commitment: Some(id),
    }
}

/// The sum of the `BilledCost` column (the first), None when a value does
/// not parse. No field before it is ever quoted, so splitting at the first
/// comma is exact.
pub fn billed_cost_sum(csv: &str) -> Option<Decimal> {
    csv.lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| l.split(',').next().and_then(|v| v.parse::<Decimal>().ok()))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use contracts::ids::{InstanceId, InvoiceId, TenantId};
    use uuid::Uuid;

    #[test]
    fn fields_with_separators_are_quoted() {
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("plain"), "plain");
    }

    #[test]
    fn one_row_per_line_with_minor_unit_costs() {
        let at = DateTime::from_timestamp(1_796_281_800, 0).unwrap_or_default();
        let line = api::InvoiceLine {
            instance_id: InstanceId(Uuid::nil()),
            meter: "gpu".into(),
            quantity: 5400,
            unit: "second".into(),
            unit_price_per_hour: Decimal::new(90, 2),
            earlier_period: false,
            charge_period_start: at,
            charge_period_end: at,
            postings: 3,
            exact_amount: Decimal::new(1_350_000_000, 9),
            amount: Decimal::new(1_350_000_000, 9),
        };
        let invoice = api::Invoice {
            id: Some(InvoiceId(Uuid::nil())),
            tenant_id: TenantId(Uuid::nil()),
            number: Some(1),
            status: contracts::states::InvoiceStatus::Paid,
            period_start: at,
            period_end: at,
            currency: "USD".into(),
            subtotal: Decimal::new(135, 2),
            total: Decimal::new(135, 2),
            exact_total: Decimal::new(135, 2),
            rounding: Decimal::ZERO,
            finalized_at: None,
            paid_at: None,
            voided_at: None,
            void_reason: None,
            lines: vec![line],
            credit_notes: Vec::new(),
        };
        let text = csv(&invoice);
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].split(',').count(), COLUMNS.len());
        assert!(rows[1].starts_with("1.35,1.35,1.35,USD,2026-12-03T07:10:00Z,"));
        assert!(rows[1].contains(",5400,Seconds,1.5,Hours,0.9,"));
        assert_eq!(billed_cost_sum(&text), Some(Decimal::new(135, 2)));
    }

    #[test]
    fn storage_and_bandwidth_rows_are_priced_in_their_own_units() {
        let at = DateTime::from_timestamp(1_796_281_800, 0).unwrap_or_default();
        let line = |meter: &str, quantity: i64, price: Decimal, amount: Decimal| api::InvoiceLine {
            instance_id: InstanceId(Uuid::nil()),
            meter: meter.into(),
            quantity,
            unit: meters::unit(meter).into(),
            unit_price_per_hour: price,
            earlier_period: false,
            charge_period_start: at,
            charge_period_end: at,
            postings: 1,
            exact_amount: amount,
            amount,
        };
        let invoice = api::Invoice {
            id: Some(InvoiceId(Uuid::nil())),
            tenant_id: TenantId(Uuid::nil()),
            number: Some(1),
            status: contracts::states::InvoiceStatus::Paid,
            period_start: at,
            period_end: at,
            currency: "USD".into(),
            subtotal: Decimal::new(366, 2),
            total: Decimal::new(366, 2),
            exact_total: Decimal::new(366, 2),
            rounding: Decimal::ZERO,
            finalized_at: None,
            paid_at: None,
            voided_at: None,
            void_reason: None,
            // 50 GiB for a month at 0.07; 2 TB down at 0.08.
            lines: vec![
                line(
                    "storage",
                    50 * 2_628_000,
                    Decimal::new(7, 2),
                    Decimal::new(350, 2),
                ),
                line(
                    "bandwidth_down",
                    2_000_000_000_000,
                    Decimal::new(8, 2),
                    Decimal::new(16, 2),
                ),
            ],
            credit_notes: Vec::new(),
        };
        let text = csv(&invoice);
        let rows: Vec<&str> = text.lines().collect();
        assert!(
            rows[1].contains(",131400000,GiB-Seconds,50,GiB-Months,0.07,"),
            "{}",
            rows[1]
        );
        assert!(rows[1].contains("USD/GiB-month"), "{}", rows[1]);
        assert!(
            rows[2].contains(",2000000000000,Bytes,2,TB,0.08,"),
            "{}",
            rows[2]
        );
        assert_eq!(billed_cost_sum(&text), Some(Decimal::new(366, 2)));
    }

    #[test]
    fn a_credit_note_is_a_negative_credit_row_and_the_costs_net_out() {
        let at = DateTime::from_timestamp(1_796_281_800, 0).unwrap_or_default();
        let mut invoice = api::Invoice {
            id: Some(InvoiceId(Uuid::nil())),
            tenant_id: TenantId(Uuid::nil()),
            number: Some(1),
            status: contracts::states::InvoiceStatus::Paid,
            period_start: at,
            period_end: at,
            currency: "USD".into(),
            subtotal: Decimal::new(135, 2),
            total: Decimal::new(135, 2),
            exact_total: Decimal::new(135, 2),
            rounding: Decimal::ZERO,
            finalized_at: None,
            paid_at: None,
            voided_at: None,
            void_reason: None,
            lines: Vec::new(),
            credit_notes: Vec::new(),
        };
        invoice.credit_notes.push(api::CreditNote {
            id: Uuid::nil(),
            tenant_id: TenantId(Uuid::nil()),
            invoice_id: InvoiceId(Uuid::nil()),
            number: 1,
            amount: Decimal::new(10, 2),
            currency: "USD".into(),
            reason: "SLA, host down".into(),
            created_at: at,
        });
        let text = csv(&invoice);
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows.len(), 2);
        assert!(rows[1].starts_with("-0.10,-0.10,-0.10,USD,"), "{}", rows[1]);
        assert!(rows[1].contains(",Credit,\"credit note 1: SLA, host down\",,,,,,,,"));
        assert_eq!(billed_cost_sum(&text), Some(Decimal::new(-10, 2)));
    }

    #[test]
    fn a_reserved_block_is_a_purchase_and_its_refund_a_credit_of_the_commitment() {
        let at = DateTime::from_timestamp(1_796_281_800, 0).unwrap_or_default();
        let reservation = Uuid::from_u128(42);
        let line = |meter: &str, quantity: i64, price: Decimal, amount: Decimal| api::InvoiceLine {
            instance_id: InstanceId(reservation),
            meter: meter.into(),
            quantity,
            unit: "gpu_second".into(),
            unit_price_per_hour: price,
            earlier_period: false,
            charge_period_start: at,
            charge_period_end: at,
            postings: 1,
            exact_amount: amount,
            amount,
        };
        let invoice = api::Invoice {
            id: Some(InvoiceId(Uuid::nil())),
            tenant_id: TenantId(Uuid::nil()),
            number: Some(1),
            status: contracts::states::InvoiceStatus::Paid,
            period_start: at,
            period_end: at,
            currency: "USD".into(),
            subtotal: Decimal::new(1150, 2),
            total: Decimal::new(1150, 2),
            exact_total: Decimal::new(1150, 2),
            rounding: Decimal::ZERO,
            finalized_at: None,
            paid_at: None,
            voided_at: None,
            void_reason: None,
            // 2 GPUs for 3 h at 2.00; half an hour of both refunded.
            lines: vec![
                line(
                    "reservation",
                    2 * 3 * 3600,
                    Decimal::TWO,
                    Decimal::new(1200, 2),
                ),
                line(
                    "reservation_refund",
                    2 * 1800,
                    Decimal::TWO,
                    Decimal::new(-50, 2),
                ),
            ],
            credit_notes: Vec::new(),
        };
        let text = csv(&invoice);
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows.len(), 3);
        assert!(
            rows[0].ends_with(
                ",CommitmentDiscountId,CommitmentDiscountType,CommitmentDiscountCategory"
            )
        );
        let commitment = format!(",{reservation},Reserved block,Spend");
        assert!(rows[1].starts_with("12.00,12.00,12.00,USD,"), "{}", rows[1]);
        assert!(rows[1].contains(",Purchase,"), "{}", rows[1]);
        assert!(rows[1].contains(",,,6,GPU-Hours,2,"), "{}", rows[1]);
        assert!(rows[1].ends_with(&commitment), "{}", rows[1]);
        assert!(rows[2].starts_with("-0.50,"), "{}", rows[2]);
        assert!(rows[2].contains(",Credit,"), "{}", rows[2]);
        assert!(rows[2].ends_with(&commitment), "{}", rows[2]);
        assert_eq!(rows[2].split(',').count(), COLUMNS.len());
        assert_eq!(billed_cost_sum(&text), Some(Decimal::new(1150, 2)));
    }
}

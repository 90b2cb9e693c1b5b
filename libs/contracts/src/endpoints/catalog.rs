//! The catalog's internal endpoints.

use super::Endpoint;
use crate::api::{
    AgentTokenIssued, AgentTokenRevoked, AllocateRequest, Allocation, AllocationReleased,
    GpuActivity, GpuActivityQuery, GpuModel, HeartbeatGap, HeartbeatGapsQuery, HostMachineRequest,
    HostProfile, HostQuery, Machine, MachineDeleted, MachineGpu, MachineHeartbeat,
    MachineHeartbeatsRequest, MachineRegistered, MigPrice, Offer, OfferPage, OfferSearch,
    PlacementSearch, RegisterMachineRequest, SetGpuModeRequest, SetMigPricesRequest,
    SetPricingRequest, SetVerificationRequest, UpdateHostProfileRequest,
};
use crate::ids::{MachineId, OrderId, ReservationId, TenantId};
use crate::operator::GpuSupply;
use crate::reservations::{
    BookRequest, Booking, CalendarQuery, CancelBookingRequest, CarveBookingRequest,
    MachineCalendar, ReservedTerms, SetReservedTermsRequest,
};

/// The GPU models the market knows, fastest first.
pub const GPU_MODELS: Endpoint<(), (), Vec<GpuModel>> = Endpoint::get("/internal/gpu-models");

/// GPUs listed, online and rented now, per model, for the operators' overview.
pub const GPU_SUPPLY: Endpoint<(), (), GpuSupply> = Endpoint::get("/internal/gpu-supply");

/// A host's profile and verification.
pub const HOST_PROFILE: Endpoint<TenantId, (), HostProfile> =
    Endpoint::get("/internal/hosts/{tenant_id}/profile");

/// Sets a host's legal name, country and payout currency.
pub const UPDATE_HOST_PROFILE: Endpoint<TenantId, UpdateHostProfileRequest, HostProfile> =
    Endpoint::put("/internal/hosts/{tenant_id}/profile");

/// An operator verifies, suspends or un-verifies a host.
pub const SET_HOST_VERIFICATION: Endpoint<TenantId, SetVerificationRequest, HostProfile> =
    Endpoint::put("/internal/hosts/{tenant_id}/verification");

/// Registers a host's machine (201) and issues its agent token.
pub const REGISTER_MACHINE: Endpoint<(), RegisterMachineRequest, MachineRegistered> =
    Endpoint::post("/internal/machines");

/// A host's machines, listed or not.
pub const HOST_MACHINES: Endpoint<(), HostQuery, Vec<Machine>> =
    Endpoint::get("/internal/machines");

/// The liveness of a batch of machines by the catalog's rule, for ordering's reconciler.
pub const MACHINE_HEARTBEATS: Endpoint<(), MachineHeartbeatsRequest, Vec<MachineHeartbeat>> =
    Endpoint::post("/internal/machines/heartbeats");

/// Sets a machine's listing terms.
pub const SET_PRICING: Endpoint<MachineId, SetPricingRequest, Machine> =
    Endpoint::put("/internal/machines/{id}/pricing");

/// A host's machine's GPUs: whole or MIG, and the slices in use.
pub const MACHINE_GPUS: Endpoint<MachineId, HostQuery, Vec<MachineGpu>> =
    Endpoint::get("/internal/machines/{id}/gpus");

/// A host sets one GPU whole or MIG (with an optional fixed layout).
pub const SET_GPU_MODE: Endpoint<MachineId, SetGpuModeRequest, Vec<MachineGpu>> =
    Endpoint::put("/internal/machines/{id}/gpus");

/// A host's per-profile MIG prices on a machine (replaced as a whole).
pub const SET_MIG_PRICES: Endpoint<MachineId, SetMigPricesRequest, Vec<MigPrice>> =
    Endpoint::put("/internal/machines/{id}/mig-prices");

/// Puts a host's machine on the offers list.
pub const LIST_MACHINE: Endpoint<MachineId, HostMachineRequest, Machine> =
    Endpoint::post("/internal/machines/{id}/list");

/// Takes a host's machine off the offers list.
pub const UNLIST_MACHINE: Endpoint<MachineId, HostMachineRequest, Machine> =
    Endpoint::post("/internal/machines/{id}/unlist");

/// Revokes a machine's agent token: its broker access goes at once.
pub const REVOKE_AGENT_TOKEN: Endpoint<MachineId, HostMachineRequest, AgentTokenRevoked> =
    Endpoint::post("/internal/machines/{id}/agent-token/revoke");

/// A host's machine's heartbeat gaps within the reliability window, newest first.
pub const HEARTBEAT_GAPS: Endpoint<MachineId, HeartbeatGapsQuery, Vec<HeartbeatGap>> =
    Endpoint::get("/internal/machines/{id}/heartbeat-gaps");

/// When a machine's GPUs were last heard and last busy, for ordering's idle rule.
pub const GPU_ACTIVITY: Endpoint<MachineId, GpuActivityQuery, GpuActivity> =
    Endpoint::get("/internal/machines/{id}/gpu-activity");

/// Issues a machine's new agent token; the old one stops working at once.
pub const ROTATE_AGENT_TOKEN: Endpoint<MachineId, HostMachineRequest, AgentTokenIssued> =
    Endpoint::post("/internal/machines/{id}/agent-token/rotate");

/// Deletes a host's machine (idempotent).
pub const DELETE_MACHINE: Endpoint<MachineId, HostMachineRequest, MachineDeleted> =
    Endpoint::post("/internal/machines/{id}/delete");

/// A page of offers matching a renter's search, or why there are none.
pub const SEARCH_OFFERS: Endpoint<(), OfferSearch, OfferPage> =
    Endpoint::post("/internal/offers/search");

/// The offers an order by constraints could be placed on, cheapest first.
pub const OFFER_PLACEMENT: Endpoint<(), PlacementSearch, Vec<Offer>> =
    Endpoint::post("/internal/offers/placement");

/// One offer by id (its machine's), free GPUs or not; 404 when off the market.
pub const OFFER: Endpoint<MachineId, (), Offer> = Endpoint::get("/internal/offers/{id}");

/// Takes GPUs of a machine for a holding key (200, idempotent per key).
pub const ALLOCATE: Endpoint<(), AllocateRequest, Allocation> =
    Endpoint::post("/internal/allocations");

/// Gives back a holding key's GPUs (idempotent).
pub const RELEASE_ALLOCATION: Endpoint<OrderId, (), AllocationReleased> =
    Endpoint::post("/internal/allocations/{order_id}/release");

// ---------------------------------------------------------------- reserved capacity (issue 20)

/// A host sets (or withdraws) a machine's terms for reserved blocks; the
/// terms now in force (`None`: not offered).
pub const SET_RESERVED_TERMS: Endpoint<MachineId, SetReservedTermsRequest, Option<ReservedTerms>> =
    Endpoint::put("/internal/machines/{id}/reserved-terms");

/// A machine's booking calendar: free GPUs per hour (and, for its host, the
/// bookings). 404 for a machine off the market unless its host asks.
pub const MACHINE_CALENDAR: Endpoint<MachineId, CalendarQuery, MachineCalendar> =
    Endpoint::get("/internal/machines/{id}/calendar");

/// Books GPUs of a machine for a block (idempotent per reservation).
pub const BOOK: Endpoint<(), BookRequest, Booking> = Endpoint::post("/internal/bookings");

/// One reservation's booking.
pub const BOOKING: Endpoint<ReservationId, (), Booking> =
    Endpoint::get("/internal/bookings/{reservation_id}");

/// Gives back a booking's GPU time from an instant on (idempotent).
pub const CANCEL_BOOKING: Endpoint<ReservationId, CancelBookingRequest, Booking> =
    Endpoint::post("/internal/bookings/{reservation_id}/cancel");

/// Moves hours of a booking to a resale buyer's reservation (idempotent per child).
pub const CARVE_BOOKING: Endpoint<ReservationId, CarveBookingRequest, Booking> =
    Endpoint::post("/internal/bookings/{reservation_id}/carve");

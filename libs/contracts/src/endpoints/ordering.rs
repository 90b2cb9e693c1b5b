//! Ordering's internal endpoints: orders, instances and their lifecycle,
//! and the provisioner's reports.

use super::Endpoint;
use crate::api::{
    CreateOrderWithRules, DeprovisioningResult, HostQuery, Instance, InstanceRules,
    MachineLiveInstances, ProvisioningResult, SetInstanceRulesRequest, TenantQuery, TenantRequest,
};
use crate::events::InstanceEvent;
use crate::ids::{InstanceId, MachineId, ResaleListingId, ReservationId};
use crate::reservations::{
    BuyListingRequest, CreateListingRequest, HostCancelRequest, ListingSearch,
    MachineReservationsQuery, ResaleListing, Reservation, ReservationQuery, ReserveRequest,
};

/// Places an order (the saga), with the lifecycle rules to attach.
pub const CREATE_ORDER: Endpoint<(), CreateOrderWithRules, Instance> =
    Endpoint::post("/internal/orders");

/// A tenant's instances.
pub const INSTANCE_LIST: Endpoint<(), TenantQuery, Vec<Instance>> =
    Endpoint::get("/internal/instances");

/// One of a tenant's instances.
pub const INSTANCE: Endpoint<InstanceId, TenantQuery, Instance> =
    Endpoint::get("/internal/instances/{id}");

/// An instance's event history.
pub const INSTANCE_EVENTS: Endpoint<InstanceId, TenantQuery, Vec<InstanceEvent>> =
    Endpoint::get("/internal/instances/{id}/events");

/// An instance's lifecycle rules.
pub const INSTANCE_RULES: Endpoint<InstanceId, TenantQuery, InstanceRules> =
    Endpoint::get("/internal/instances/{id}/rules");

/// Replaces an instance's lifecycle rules.
pub const SET_INSTANCE_RULES: Endpoint<InstanceId, SetInstanceRulesRequest, InstanceRules> =
    Endpoint::put("/internal/instances/{id}/rules");

/// Stops an instance (its disk is kept).
pub const STOP: Endpoint<InstanceId, TenantRequest, Instance> =
    Endpoint::post("/internal/instances/{id}/stop");

/// Starts a stopped instance again.
pub const START: Endpoint<InstanceId, TenantRequest, Instance> =
    Endpoint::post("/internal/instances/{id}/start");

/// Destroys an instance and its disk.
pub const DESTROY: Endpoint<InstanceId, TenantRequest, Instance> =
    Endpoint::post("/internal/instances/{id}/destroy");

/// The instances still alive on a host's machine (asked before the machine
/// is deleted).
pub const MACHINE_LIVE_INSTANCES: Endpoint<MachineId, HostQuery, MachineLiveInstances> =
    Endpoint::get("/internal/machines/{id}/live-instances");

/// The provisioner's report on a deprovisioning job.
pub const DEPROVISIONING_RESULT: Endpoint<InstanceId, DeprovisioningResult, Instance> =
    Endpoint::post("/internal/instances/{id}/deprovisioning-result");

/// The provisioner's report that an instance is ready or has failed.
pub const PROVISIONING_RESULT: Endpoint<InstanceId, ProvisioningResult, Instance> =
    Endpoint::post("/internal/instances/{id}/provisioning-result");

// ---------------------------------------------------------------- reserved capacity (issue 20)

/// Books a block (the reservation saga; idempotent per key).
pub const RESERVE: Endpoint<(), ReserveRequest, Reservation> =
    Endpoint::post("/internal/reservations");

/// A tenant's reservations, newest block first.
pub const RESERVATION_LIST: Endpoint<(), ReservationQuery, Vec<Reservation>> =
    Endpoint::get("/internal/reservations");

/// One of a tenant's reservations.
pub const RESERVATION: Endpoint<ReservationId, ReservationQuery, Reservation> =
    Endpoint::get("/internal/reservations/{id}");

/// A host cancels a reservation on its machine (refund plus penalty).
pub const HOST_CANCEL_RESERVATION: Endpoint<ReservationId, HostCancelRequest, Reservation> =
    Endpoint::post("/internal/reservations/{id}/host-cancel");

/// A host's machine's reservations.
pub const MACHINE_RESERVATIONS: Endpoint<MachineId, MachineReservationsQuery, Vec<Reservation>> =
    Endpoint::get("/internal/machines/{id}/reservations");

/// The holder lists future hours of a reservation for resale.
pub const CREATE_LISTING: Endpoint<ReservationId, CreateListingRequest, ResaleListing> =
    Endpoint::post("/internal/reservations/{id}/listings");

/// A tenant's own listings, newest first.
pub const MY_LISTINGS: Endpoint<(), ReservationQuery, Vec<ResaleListing>> =
    Endpoint::get("/internal/resale-listings/mine");

/// Open listings whose hours have not started, soonest first.
pub const SEARCH_LISTINGS: Endpoint<(), ListingSearch, Vec<ResaleListing>> =
    Endpoint::get("/internal/resale-listings");

/// The seller withdraws an open listing.
pub const WITHDRAW_LISTING: Endpoint<ResaleListingId, ReservationQuery, ResaleListing> =
    Endpoint::post("/internal/resale-listings/{id}/withdraw");

/// A buyer takes a listing's hours (idempotent per key): the new reservation.
pub const BUY_LISTING: Endpoint<ResaleListingId, BuyListingRequest, Reservation> =
    Endpoint::post("/internal/resale-listings/{id}/buy");

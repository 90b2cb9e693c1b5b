//! Ordering's internal endpoints: orders, instances and their lifecycle,
//! and the provisioner's reports.

use super::Endpoint;
use crate::api::{
    CreateOrderWithRules, DeprovisioningResult, HostQuery, Instance, InstanceRules,
    MachineLiveInstances, ProvisioningResult, SetInstanceRulesRequest, TenantQuery, TenantRequest,
};
use crate::events::InstanceEvent;
use crate::ids::{InstanceId, MachineId};

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

use actix_web::web;
use contracts::api::{
    AgentTokenIssued, AllocateRequest, Allocation, AllocationReleased, GpuModel,
    HostMachineRequest, HostProfile, HostQuery, Machine, MachineDeleted, MachineRegistered, Offer,
    OfferPage, OfferSearch, PlacementSearch, RegisterMachineRequest, SetPricingRequest,
    SetVerificationRequest, UpdateHostProfileRequest,
};
use contracts::endpoints::catalog::{
    ALLOCATE, BOOK, BOOKING, CANCEL_BOOKING, CARVE_BOOKING, DELETE_MACHINE, GPU_ACTIVITY,
    GPU_MODELS, GPU_SUPPLY, HEARTBEAT_GAPS, HOST_MACHINES, HOST_PROFILE, LIST_MACHINE,
    MACHINE_CALENDAR, MACHINE_GPUS, MACHINE_HEARTBEATS, OFFER, OFFER_PLACEMENT, REGISTER_MACHINE,
    RELEASE_ALLOCATION, REVOKE_AGENT_TOKEN, ROTATE_AGENT_TOKEN, SEARCH_OFFERS, SET_GPU_MODE,
    SET_HOST_VERIFICATION, SET_MIG_PRICES, SET_PRICING, SET_RESERVED_TERMS, UNLIST_MACHINE,
    UPDATE_HOST_PROFILE,
};
use contracts::ids::{MachineId, OrderId, ReservationId, TenantId};
use contracts::reservations::{
    BookRequest, Booking, CalendarQuery, CancelBookingRequest, CarveBookingRequest,
    MachineCalendar, ReservedTerms, SetReservedTermsRequest,
};
use platform::Db;
use platform::endpoint::{Reply, route};
use platform::internal::ServiceCaller;

use crate::agents::AgentAccess;
use crate::market::Market;
use crate::{Error, allocations, bookings, gpu_models, hosts, machines, offers};

pub fn configure(cfg: &mut web::ServiceConfig) {
    route(cfg, GPU_MODELS, gpu_model_list);
    route(cfg, GPU_SUPPLY, crate::supply::supply_route);
    route(cfg, HOST_PROFILE, host_profile);
    route(cfg, UPDATE_HOST_PROFILE, update_host_profile);
    route(cfg, SET_HOST_VERIFICATION, set_verification);
    route(cfg, REGISTER_MACHINE, register);
    route(cfg, HOST_MACHINES, host_machines);
    route(cfg, MACHINE_HEARTBEATS, crate::liveness::heartbeats_route);
    route(cfg, SET_PRICING, set_pricing);
    route(cfg, MACHINE_GPUS, machine_gpus);
    route(cfg, SET_GPU_MODE, set_gpu_mode);
    route(cfg, SET_MIG_PRICES, set_mig_prices);
    route(cfg, LIST_MACHINE, list);
    route(cfg, UNLIST_MACHINE, unlist);
    route(cfg, REVOKE_AGENT_TOKEN, crate::agents::revoke_route);
    route(cfg, HEARTBEAT_GAPS, crate::heartbeats::gaps_route);
    route(cfg, GPU_ACTIVITY, crate::heartbeats::gpu_activity_route);
    route(cfg, ROTATE_AGENT_TOKEN, rotate_token);
    route(cfg, DELETE_MACHINE, delete_machine);
    route(cfg, SEARCH_OFFERS, search);
    route(cfg, OFFER_PLACEMENT, placement);
    route(cfg, OFFER, get_offer);
    route(cfg, ALLOCATE, allocate);
    route(cfg, RELEASE_ALLOCATION, release);
    route(cfg, SET_RESERVED_TERMS, set_reserved_terms);
    route(cfg, MACHINE_CALENDAR, machine_calendar);
    route(cfg, BOOK, book);
    route(cfg, BOOKING, booking);
    route(cfg, CANCEL_BOOKING, cancel_booking);
    route(cfg, CARVE_BOOKING, carve_booking);
}

async fn gpu_model_list(
    _: ServiceCaller,
    db: web::Data<Db>,
) -> Result<Reply<Vec<GpuModel>>, Error> {
    Ok(Reply::ok(gpu_models::all(&db).await?))
}

async fn host_profile(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<TenantId>,
) -> Result<Reply<HostProfile>, Error> {
    Ok(Reply::ok(hosts::get(&db, path.into_inner()).await?))
}

async fn update_host_profile(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<TenantId>,
    body: web::Json<UpdateHostProfileRequest>,
) -> Result<Reply<HostProfile>, Error> {
    Ok(Reply::ok(
        hosts::update(&db, path.into_inner(), body.into_inner()).await?,
    ))
}

async fn set_verification(
    _: ServiceCaller,
    db: web::Data<Db>,
    events: web::Data<allocations::Events>,
    path: web::Path<TenantId>,
    body: web::Json<SetVerificationRequest>,
) -> Result<Reply<HostProfile>, Error> {
    let body = body.into_inner();
    let profile =
        hosts::set_verification(&db, &events.0, path.into_inner(), body.operator_id, body).await?;
    tracing::info!(tenant.id = %profile.tenant_id, verification = ?profile.verification, "host verification set");
    Ok(Reply::ok(profile))
}

async fn register(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    agents: web::Data<AgentAccess>,
    body: web::Json<RegisterMachineRequest>,
) -> Result<Reply<MachineRegistered>, Error> {
    let registered = machines::register_machine(
        &db,
        &market,
        body.into_inner(),
        async |id, token| agents.grant(MachineId(id), &token).await,
        async |id, hash| agents.remove(MachineId(id), &hash).await,
    )
    .await?;
    tracing::info!(machine.id = %registered.machine.id, "machine registered");
    Ok(Reply::created(registered))
}

async fn host_machines(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    q: web::Query<HostQuery>,
) -> Result<Reply<Vec<Machine>>, Error> {
    Ok(Reply::ok(
        machines::host_machines(&db, &market, q.host_tenant_id).await?,
    ))
}

async fn set_pricing(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    path: web::Path<MachineId>,
    body: web::Json<SetPricingRequest>,
) -> Result<Reply<Machine>, Error> {
    Ok(Reply::ok(
        machines::set_pricing(&db, &market, path.into_inner(), body.into_inner()).await?,
    ))
}

async fn machine_gpus(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<MachineId>,
    q: web::Query<HostQuery>,
) -> Result<Reply<Vec<contracts::api::MachineGpu>>, Error> {
    Ok(Reply::ok(
        crate::mig::machine_gpus(&db, path.into_inner(), q.host_tenant_id).await?,
    ))
}

async fn set_gpu_mode(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<MachineId>,
    body: web::Json<contracts::api::SetGpuModeRequest>,
) -> Result<Reply<Vec<contracts::api::MachineGpu>>, Error> {
    Ok(Reply::ok(
        crate::mig::set_gpu_mode(&db, path.into_inner(), body.into_inner()).await?,
    ))
}

async fn set_mig_prices(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<MachineId>,
    body: web::Json<contracts::api::SetMigPricesRequest>,
) -> Result<Reply<Vec<contracts::api::MigPrice>>, Error> {
    Ok(Reply::ok(
        crate::mig::set_mig_prices(&db, path.into_inner(), body.into_inner()).await?,
    ))
}

async fn list(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    events: web::Data<allocations::Events>,
    path: web::Path<MachineId>,
    body: web::Json<HostMachineRequest>,
) -> Result<Reply<Machine>, Error> {
    set_listed(&db, &market, &events, path.into_inner(), &body, true).await
}

async fn unlist(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    events: web::Data<allocations::Events>,
    path: web::Path<MachineId>,
    body: web::Json<HostMachineRequest>,
) -> Result<Reply<Machine>, Error> {
    set_listed(&db, &market, &events, path.into_inner(), &body, false).await
}

/// `list` and `unlist`: the host's machine on or off the market (unlisting
/// cancels its reserved blocks that have not ended).
async fn set_listed(
    db: &Db,
    market: &Market,
    events: &allocations::Events,
    machine_id: MachineId,
    body: &HostMachineRequest,
    listed: bool,
) -> Result<Reply<Machine>, Error> {
    let machine = machines::list_machine(
        db,
        market,
        &events.0,
        machine_id,
        body.host_tenant_id,
        listed,
    )
    .await?;
    Ok(Reply::ok(machine))
}

async fn rotate_token(
    _: ServiceCaller,
    db: web::Data<Db>,
    agents: web::Data<AgentAccess>,
    path: web::Path<MachineId>,
    body: web::Json<HostMachineRequest>,
) -> Result<Reply<AgentTokenIssued>, Error> {
    let machine_id = path.into_inner().into_uuid();
    let token = machines::rotate_agent_token(
        &db,
        MachineId(machine_id),
        body.host_tenant_id,
        async |id, token| agents.grant(MachineId(id), &token).await,
        async |id, old| {
            agents
                .retire(MachineId(id), &old, "agent token replaced")
                .await
        },
        async |id, new| agents.remove(MachineId(id), &new).await,
    )
    .await?;
    Ok(Reply::ok(AgentTokenIssued {
        machine_id: MachineId(machine_id),
        agent_token: token,
    }))
}

async fn delete_machine(
    _: ServiceCaller,
    db: web::Data<Db>,
    agents: web::Data<AgentAccess>,
    events: web::Data<allocations::Events>,
    path: web::Path<MachineId>,
    body: web::Json<HostMachineRequest>,
) -> Result<Reply<MachineDeleted>, Error> {
    let machine_id = path.into_inner().into_uuid();
    machines::delete_machine(
        &db,
        &events.0,
        MachineId(machine_id),
        body.host_tenant_id,
        async |id, hash| agents.remove(MachineId(id), &hash).await,
    )
    .await?;
    Ok(Reply::ok(MachineDeleted {
        machine_id: MachineId(machine_id),
        deleted: true,
    }))
}

async fn search(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    body: web::Json<OfferSearch>,
) -> Result<Reply<OfferPage>, Error> {
    Ok(Reply::ok(
        offers::search(&db, &market, body.into_inner()).await?,
    ))
}

async fn get_offer(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    path: web::Path<MachineId>,
) -> Result<Reply<Offer>, Error> {
    Ok(Reply::ok(
        offers::get(&db, &market, path.into_inner().into_uuid()).await?,
    ))
}

async fn placement(
    _: ServiceCaller,
    db: web::Data<Db>,
    market: web::Data<Market>,
    body: web::Json<PlacementSearch>,
) -> Result<Reply<Vec<Offer>>, Error> {
    Ok(Reply::ok(
        offers::placement_candidates(&db, &market, body.into_inner()).await?,
    ))
}

async fn allocate(
    _: ServiceCaller,
    db: web::Data<Db>,
    events: web::Data<allocations::Events>,
    body: web::Json<AllocateRequest>,
) -> Result<Reply<Allocation>, Error> {
    Ok(Reply::ok(
        allocations::allocate(&db, &events, body.into_inner()).await?,
    ))
}

async fn release(
    _: ServiceCaller,
    db: web::Data<Db>,
    events: web::Data<allocations::Events>,
    path: web::Path<OrderId>,
) -> Result<Reply<AllocationReleased>, Error> {
    allocations::release(&db, &events, path.into_inner()).await?;
    Ok(Reply::ok(AllocationReleased { released: true }))
}

// ---------------------------------------------------------------- reserved capacity

async fn set_reserved_terms(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<MachineId>,
    body: web::Json<SetReservedTermsRequest>,
) -> Result<Reply<Option<ReservedTerms>>, Error> {
    Ok(Reply::ok(
        crate::reserved_terms::set(&db, path.into_inner(), body.into_inner()).await?,
    ))
}

async fn machine_calendar(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<MachineId>,
    q: web::Query<CalendarQuery>,
) -> Result<Reply<MachineCalendar>, Error> {
    Ok(Reply::ok(
        crate::calendar::calendar(&db, path.into_inner(), q.into_inner()).await?,
    ))
}

async fn book(
    _: ServiceCaller,
    db: web::Data<Db>,
    body: web::Json<BookRequest>,
) -> Result<Reply<Booking>, Error> {
    Ok(Reply::ok(bookings::book(&db, body.into_inner()).await?))
}

async fn booking(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<ReservationId>,
) -> Result<Reply<Booking>, Error> {
    Ok(Reply::ok(bookings::get(&db, path.into_inner()).await?))
}

async fn cancel_booking(
    _: ServiceCaller,
    db: web::Data<Db>,
    events: web::Data<allocations::Events>,
    path: web::Path<ReservationId>,
    body: web::Json<CancelBookingRequest>,
) -> Result<Reply<Booking>, Error> {
    Ok(Reply::ok(
        bookings::cancel(&db, &events.0, path.into_inner(), body.into_inner()).await?,
    ))
}

async fn carve_booking(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<ReservationId>,
    body: web::Json<CarveBookingRequest>,
) -> Result<Reply<Booking>, Error> {
    Ok(Reply::ok(
        bookings::carve(&db, path.into_inner(), body.into_inner()).await?,
    ))
}

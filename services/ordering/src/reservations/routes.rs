//! The reservation endpoints (`contracts::endpoints::ordering`, issue 20).

use actix_web::web;
use contracts::endpoints::ordering::{
    BUY_LISTING, CREATE_LISTING, HOST_CANCEL_RESERVATION, MACHINE_RESERVATIONS, MY_LISTINGS,
    RESERVATION, RESERVATION_LIST, RESERVE, SEARCH_LISTINGS, WITHDRAW_LISTING,
};
use contracts::ids::{MachineId, ResaleListingId, ReservationId};
use contracts::reservations::{
    BuyListingRequest, CreateListingRequest, HostCancelRequest, ListingSearch,
    MachineReservationsQuery, ResaleListing, Reservation, ReservationQuery, ReserveRequest,
};
use diesel::prelude::*;
use platform::Db;
use platform::endpoint::{Reply, route};
use platform::internal::ServiceCaller;
use schema::ordering_reservations::reservations;

use super::store::{self, ReservationRow};
use super::{book, cancel, resale};
use crate::{Deps, Error};

/// The most reservations one list answers.
const MAX_LISTED: i64 = 200;

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    route(cfg, RESERVE, reserve);
    route(cfg, RESERVATION_LIST, list);
    route(cfg, RESERVATION, get);
    route(cfg, HOST_CANCEL_RESERVATION, host_cancel);
    route(cfg, MACHINE_RESERVATIONS, machine_reservations);
    route(cfg, CREATE_LISTING, create_listing);
    route(cfg, MY_LISTINGS, my_listings);
    route(cfg, SEARCH_LISTINGS, search_listings);
    route(cfg, WITHDRAW_LISTING, withdraw_listing);
    route(cfg, BUY_LISTING, buy_listing);
}

type Answer<R> = Result<Reply<R>, Error>;

async fn reserve(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    body: web::Json<ReserveRequest>,
) -> Answer<Reservation> {
    Ok(Reply::ok(
        book::reserve(&db, &deps, body.into_inner()).await?,
    ))
}

async fn list(
    _: ServiceCaller,
    db: web::Data<Db>,
    q: web::Query<ReservationQuery>,
) -> Answer<Vec<Reservation>> {
    let tenant = q.tenant_id.into_uuid();
    Ok(Reply::ok(
        db.run(move |conn| {
            let rows: Vec<ReservationRow> = reservations::table
                .filter(reservations::tenant_id.eq(tenant))
                .order((reservations::starts_at.desc(), reservations::id.desc()))
                .limit(MAX_LISTED)
                .select(ReservationRow::as_select())
                .load(conn)?;
            store::many(conn, rows)
        })
        .await?,
    ))
}

async fn get(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<ReservationId>,
    q: web::Query<ReservationQuery>,
) -> Answer<Reservation> {
    let (id, tenant) = (path.into_inner().into_uuid(), q.tenant_id);
    Ok(Reply::ok(
        db.run(move |conn| {
            let row = store::owned(conn, id, tenant)?;
            store::one(conn, row)
        })
        .await?,
    ))
}

async fn host_cancel(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    path: web::Path<ReservationId>,
    body: web::Json<HostCancelRequest>,
) -> Answer<Reservation> {
    Ok(Reply::ok(
        cancel::host_cancel(&db, &deps, path.into_inner(), body.into_inner()).await?,
    ))
}

/// A host's machine's reservations: booked, running, cancelled or ended in
/// the last 31 days. Another host's machine lists nothing, like a machine
/// without reservations (ordering does not know who owns a machine; the
/// reservations do).
async fn machine_reservations(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<MachineId>,
    q: web::Query<MachineReservationsQuery>,
) -> Answer<Vec<Reservation>> {
    let (machine, host) = (path.into_inner().into_uuid(), q.host_tenant_id.into_uuid());
    Ok(Reply::ok(
        db.run(move |conn| {
            let since = contracts::time::now() - chrono::TimeDelta::days(31);
            let rows: Vec<ReservationRow> = reservations::table
                .filter(reservations::machine_id.eq(machine))
                .filter(reservations::host_tenant_id.eq(host))
                .filter(reservations::status.eq_any(["booked", "cancelled"]))
                .filter(reservations::ends_at.gt(since))
                .order((reservations::starts_at, reservations::id))
                .limit(MAX_LISTED)
                .select(ReservationRow::as_select())
                .load(conn)?;
            store::many(conn, rows)
        })
        .await?,
    ))
}

async fn create_listing(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<ReservationId>,
    body: web::Json<CreateListingRequest>,
) -> Answer<ResaleListing> {
    Ok(Reply::ok(
        resale::create(&db, path.into_inner(), body.into_inner()).await?,
    ))
}

async fn my_listings(
    _: ServiceCaller,
    db: web::Data<Db>,
    q: web::Query<ReservationQuery>,
) -> Answer<Vec<ResaleListing>> {
    Ok(Reply::ok(resale::mine(&db, q.tenant_id).await?))
}

async fn search_listings(
    _: ServiceCaller,
    db: web::Data<Db>,
    q: web::Query<ListingSearch>,
) -> Answer<Vec<ResaleListing>> {
    Ok(Reply::ok(resale::search(&db, q.into_inner()).await?))
}

async fn withdraw_listing(
    _: ServiceCaller,
    db: web::Data<Db>,
    path: web::Path<ResaleListingId>,
    body: web::Json<ReservationQuery>,
) -> Answer<ResaleListing> {
    Ok(Reply::ok(
        resale::withdraw(&db, path.into_inner(), body.tenant_id).await?,
    ))
}

async fn buy_listing(
    _: ServiceCaller,
    db: web::Data<Db>,
    deps: web::Data<Deps>,
    path: web::Path<ResaleListingId>,
    body: web::Json<BuyListingRequest>,
) -> Answer<Reservation> {
    Ok(Reply::ok(
        resale::buy(&db, &deps, path.into_inner(), body.into_inner()).await?,
    ))
}

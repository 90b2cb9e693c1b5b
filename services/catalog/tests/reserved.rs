#![allow(clippy::expect_used, clippy::unwrap_used)] // Tests: a failed expectation is the failure.

//! Reserved blocks against a real database (docs/reservations.md): which
//! GPUs a booking and a rental get, the exclusion constraint, the block
//! sweeper's warning, start and end, allocations inside a block, carving
//! and cancelling. Blocks are booked in the future as the API requires;
//! the test then moves their booked periods in SQL to make time pass.
//! Each test makes its own database and drops it.

use chrono::{DateTime, Duration, DurationRound, Utc};
use contracts::ErrorCode;
use contracts::api::{AllocateRequest, Allocation, RentalType};
use contracts::ids::{InstanceId, MachineId, OrderId, ReservationId, TenantId};
use contracts::reservations::{
    BookRequest, Booking, CalendarQuery, CancelBookingRequest, CarveBookingRequest, HourRange,
    ReservedTermsInput, SetReservedTermsRequest,
};
use diesel::sql_types::{BigInt, Bool, Text};
use diesel::{Connection, PgConnection, RunQueryDsl};
use gpumarket_catalog::allocations::{self, Events};
use gpumarket_catalog::{Error, blocks, bookings, calendar, reserved_terms};
use platform::Db;
use platform::test_db::TestDb;

const EXCHANGE: &str = "gpumarket.events";

struct World {
    test: TestDb,
    db: Db,
    host: TenantId,
    machine: MachineId,
}

impl World {
    /// A listed, online, priced machine of `gpus` GPUs with reserved terms
    /// (2.50 per GPU-hour, 30 days ahead, blocks of 2 hours or more).
    async fn new(tag: &str, gpus: i32) -> World {
        let test = TestDb::new(tag).expect("test database");
        let db = Db::connect(&test.url, 2).expect("pool");
        let host = TenantId::new();
        let machine = MachineId::new();
        let world = World {
            test,
            db,
            host,
            machine,
        };
        world.exec(&format!(
            "INSERT INTO catalog.machines (id, host_tenant_id, name, gpu_model, gpu_count, vram_gib, cpu_cores,
                 ram_gib, disk_gib, country, price_per_gpu_hour, currency, listed, agent_token_sha256,
                 idempotency_key, last_heartbeat_at, storage_price_per_gb_month)
             VALUES ('{machine}', '{host}', 'm', 'H100 80GB SXM', {gpus}, 80, 32, 256, 2000, 'SE', 2.00, 'USD',
                 true, md5('{machine}'), '{machine}', now(), 0.10)"
        ));
        let terms = reserved_terms::set(
            &world.db,
            machine,
            SetReservedTermsRequest {
                host_tenant_id: host,
                terms: Some(ReservedTermsInput {
                    price_per_gpu_hour: "2.5".parse().unwrap(),
                    max_lead_days: 30,
                    min_block_hours: 2,
                }),
            },
        )
        .await
        .expect("terms")
        .expect("offered");
        assert_eq!(terms.currency, "USD");
        world
    }

    fn conn(&self) -> PgConnection {
        PgConnection::establish(&self.test.url).expect("connect")
    }

    fn exec(&self, sql: &str) {
        diesel::sql_query(sql).execute(&mut self.conn()).expect(sql);
    }

    fn count(&self, sql: &str) -> i64 {
        diesel::select(diesel::dsl::sql::<BigInt>(&format!("({sql})")))
            .get_result(&mut self.conn())
            .expect(sql)
    }

    fn flag(&self, sql: &str) -> bool {
        diesel::select(diesel::dsl::sql::<Bool>(&format!("({sql})")))
            .get_result(&mut self.conn())
            .expect(sql)
    }

    fn text(&self, sql: &str) -> String {
        diesel::select(diesel::dsl::sql::<Text>(&format!("({sql})")))
            .get_result(&mut self.conn())
            .expect(sql)
    }

    async fn book(
        &self,
        id: ReservationId,
        tenant: TenantId,
        gpus: i32,
        hours: (i64, i64),
    ) -> Result<Booking, Error> {
        bookings::book(
            &self.db,
            BookRequest {
                reservation_id: id,
                tenant_id: tenant,
                machine_id: self.machine,
                gpu_count: gpus,
                starts_at: hour(hours.0),
                ends_at: hour(hours.1),
                max_price_per_gpu_hour: None,
            },
        )
        .await
    }

    async fn allocate(
        &self,
        tenant: TenantId,
        gpus: i32,
        reservation: Option<ReservationId>,
    ) -> Result<Allocation, Error> {
        allocations::allocate(
            &self.db,
            &Events(EXCHANGE.into()),
            AllocateRequest {
                continue_up_to_per_gpu_hour: Default::default(),
                order_id: OrderId::new(),
                tenant_id: tenant,
                machine_id: self.machine,
                gpu_count: gpus,
                rental_type: RentalType::OnDemand,
                bid_per_gpu_hour: None,
                max_price_per_gpu_hour: None,
                instance_id: Some(InstanceId::new()),
                mig_profile: None,
                reservation_id: reservation,
            },
        )
        .await
    }

    async fn sweep(&self) -> blocks::Pass {
        blocks::sweep(&self.db, EXCHANGE).await.expect("sweep")
    }

    /// Moves every booked period of `id` to `[now + from, now + to)`.
    fn move_block(&self, id: ReservationId, from: &str, to: &str) {
        self.exec(&format!(
            "UPDATE catalog.booked_gpus SET period = tstzrange(now() + interval '{from}', now() + interval '{to}', '[)')
             WHERE reservation_id = '{id}'"
        ));
    }

    fn outbox(&self, routing_key: &str) -> i64 {
        self.count(&format!(
            "SELECT count(*) FROM catalog.outbox WHERE routing_key = '{routing_key}'"
        ))
    }
}

/// The whole UTC hour `n` hours after the next one.
fn hour(n: i64) -> DateTime<Utc> {
    Utc::now().duration_trunc(Duration::hours(1)).unwrap() + Duration::hours(1 + n)
}

fn code(result: Result<impl std::fmt::Debug, Error>) -> ErrorCode {
    result.expect_err("refused").code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookings_choose_free_gpus_and_never_overlap() {
    let w = World::new("catalog_booking", 4).await;
    let renter = TenantId::new();
    let rental = w.allocate(renter, 1, None).await.expect("rental");
    assert_eq!(rental.gpu_indices, vec![0]);
    assert_eq!(rental.ends_by, None);

    // GPUs no rental holds first.
    let r1 = ReservationId::new();
    let b1 = w.book(r1, renter, 2, (1, 5)).await.expect("booked");
    assert_eq!(b1.gpu_indices, vec![1, 2]);
    assert_eq!(b1.price_per_gpu_hour.to_string(), "2.5");
    assert_eq!(b1.storage_price_per_gb_month.to_string(), "0.1");
    // Idempotent by reservation; another request under its id is a conflict.
    assert_eq!(w.book(r1, renter, 2, (1, 5)).await.expect("replay"), b1);
    assert_eq!(
        code(w.book(r1, renter, 1, (1, 5)).await),
        ErrorCode::Conflict
    );

    // Overlapping hours: only GPUs 0 and 3 are free for the whole block.
    let refused = w.book(ReservationId::new(), renter, 3, (3, 7)).await;
    let Err(Error::InsufficientCapacity(why)) = refused else {
        panic!("{refused:?}")
    };
    assert_eq!(why, "2 GPUs free for the whole block, 3 asked");
    let b3 = w
        .book(ReservationId::new(), renter, 2, (3, 7))
        .await
        .expect("booked");
    assert_eq!(b3.gpu_indices, vec![0, 3]);
    // Hours after a block are free again.
    let b4 = w
        .book(ReservationId::new(), renter, 2, (5, 8))
        .await
        .expect("booked");
    assert_eq!(b4.gpu_indices, vec![1, 2]);

    // The database refuses what a race would get past the choice.
    let raced = diesel::sql_query(format!(
        "INSERT INTO catalog.booked_gpus (reservation_id, machine_id, gpu_index, period)
         VALUES ('{r1}', '{}', 3, tstzrange(now() + interval '4 hours', now() + interval '5 hours'))",
        w.machine
    ))
    .execute(&mut w.conn());
    let raced = raced.map_err(Error::from);
    assert_eq!(code(raced), ErrorCode::InsufficientCapacity);

    // A rental now takes the GPU booked latest and must end by its booking.
    let second = w.allocate(renter, 1, None).await.expect("rental");
    assert_eq!(second.gpu_indices, vec![3]);
    assert_eq!(second.ends_by, Some(hour(3)));

    // Refusals: terms, whole hours, count, price.
    let mut req = BookRequest {
        reservation_id: ReservationId::new(),
        tenant_id: renter,
        machine_id: w.machine,
        gpu_count: 1,
        starts_at: hour(10) + Duration::minutes(30),
        ends_at: hour(14),
        max_price_per_gpu_hour: None,
    };
    assert_eq!(
        code(bookings::book(&w.db, req.clone()).await),
        ErrorCode::Validation
    );
    req.starts_at = hour(10);
    req.gpu_count = 5;
    assert_eq!(
        code(bookings::book(&w.db, req.clone()).await),
        ErrorCode::Validation
    );
    req.gpu_count = 1;
    req.max_price_per_gpu_hour = Some("2.4".parse().unwrap());
    assert_eq!(
        code(bookings::book(&w.db, req.clone()).await),
        ErrorCode::PriceAboveMax
    );
    req.ends_at = hour(11);
    req.max_price_per_gpu_hour = None;
    assert_eq!(
        code(bookings::book(&w.db, req.clone()).await),
        ErrorCode::Validation
    );

    // Another host's machine is not found; withdrawn terms stop bookings.
    let other = reserved_terms::set(
        &w.db,
        w.machine,
        SetReservedTermsRequest {
            host_tenant_id: renter,
            terms: None,
        },
    )
    .await;
    assert_eq!(code(other), ErrorCode::NotFound);
    let withdrawn = reserved_terms::set(
        &w.db,
        w.machine,
        SetReservedTermsRequest {
            host_tenant_id: w.host,
            terms: None,
        },
    )
    .await
    .expect("withdrawn");
    assert_eq!(withdrawn, None);
    req.ends_at = hour(14);
    assert_eq!(
        code(bookings::book(&w.db, req).await),
        ErrorCode::Validation
    );

    // The calendar: free whole GPUs per hour; bookings for the host only.
    let query = |host| CalendarQuery {
        from: hour(0),
        to: hour(9),
        host_tenant_id: host,
    };
    let cal = calendar::calendar(&w.db, w.machine, query(None))
        .await
        .expect("calendar");
    let free: Vec<i32> = cal.hours.iter().map(|h| h.free_gpus).collect();
    assert_eq!(free, vec![4, 2, 2, 0, 0, 0, 0, 2, 4]);
    assert!(cal.bookings.is_empty());
    let cal = calendar::calendar(&w.db, w.machine, query(Some(w.host)))
        .await
        .expect("calendar");
    assert_eq!(cal.bookings.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_warns_starts_and_ends_blocks() {
    let w = World::new("catalog_blocks", 2).await;
    let renter = TenantId::new();
    let holder = TenantId::new();
    let rental = w.allocate(renter, 1, None).await.expect("rental");
    assert_eq!(rental.gpu_indices, vec![0]);
    let r = ReservationId::new();
    let booking = w.book(r, holder, 2, (2, 6)).await.expect("booked");
    assert_eq!(booking.gpu_indices, vec![0, 1]);

    // Fifteen minutes ahead: the rental is warned, once.
    w.move_block(r, "10 minutes", "2 hours");
    assert_eq!(w.sweep().await.warned, 1);
    assert_eq!(w.sweep().await, blocks::Pass::default());
    assert_eq!(w.outbox("catalog.allocation.ending_soon"), 1);
    assert!(w.text(
        "SELECT body->'payload'->>'reason' FROM catalog.outbox WHERE routing_key = 'catalog.allocation.ending_soon'"
    ).starts_with("reserved block starts at "));

    // The block starts: the rental is preempted in the transaction that
    // gives the GPUs to the block.
    w.move_block(r, "-1 minute", "1 hour");
    let before = w.allocate(renter, 1, None).await;
    assert_eq!(code(before), ErrorCode::InsufficientCapacity);
    assert_eq!(w.sweep().await.activated, 1);
    assert!(w.flag(&format!(
        "SELECT preempted_by = '{r}' AND released_at = preempted_at FROM catalog.allocations
         WHERE order_id = '{}'",
        rental.order_id
    )));
    assert_eq!(
        w.text("SELECT body->'payload'->>'reason' FROM catalog.outbox WHERE routing_key = 'catalog.allocation.preempted'"),
        "reserved block starts"
    );
    assert_eq!(
        w.count(&format!(
            "SELECT gpus_allocated::bigint FROM catalog.machines WHERE id = '{}'",
            w.machine
        )),
        2
    );
    assert_eq!(
        w.count(&format!(
            "SELECT count(*) FROM catalog.gpu_holds h JOIN catalog.allocations a ON a.order_id = h.holder
             WHERE a.block_reservation_id = '{r}'"
        )),
        16
    );
    assert_eq!(w.sweep().await, blocks::Pass::default());
    assert_eq!(
        code(w.allocate(renter, 1, None).await),
        ErrorCode::InsufficientCapacity
    );

    // Inside the block: the holder only, no GPU price, one instance per GPU.
    assert_eq!(
        code(w.allocate(renter, 1, Some(r)).await),
        ErrorCode::NotFound
    );
    let first = w.allocate(holder, 1, Some(r)).await.expect("inside");
    assert_eq!(first.price_per_gpu_hour.to_string(), "0");
    assert_eq!(first.storage_price_per_gb_month.to_string(), "0.1");
    assert_eq!(first.reservation_id, Some(r));
    assert!(first.ends_by.is_some());
    let second = w.allocate(holder, 1, Some(r)).await.expect("inside");
    assert_ne!(first.gpu_indices, second.gpu_indices);
    assert_eq!(
        code(w.allocate(holder, 1, Some(r)).await),
        ErrorCode::InsufficientCapacity
    );
    allocations::release(&w.db, &Events(EXCHANGE.into()), second.order_id)
        .await
        .expect("release");
    assert_eq!(
        w.count(&format!(
            "SELECT gpus_allocated::bigint FROM catalog.machines WHERE id = '{}'",
            w.machine
        )),
        2
    );
    let third = w.allocate(holder, 1, Some(r)).await.expect("inside again");
    assert_eq!(third.gpu_indices, second.gpu_indices);

    // Ending soon inside the block, then the end: instances preempted, GPUs back.
    w.move_block(r, "-1 hour", "10 minutes");
    assert_eq!(w.sweep().await.warned, 2);
    w.move_block(r, "-2 hours", "-1 second");
    let pass = w.sweep().await;
    assert_eq!(pass.released, 1);
    assert_eq!(
        w.count(&format!(
            "SELECT gpus_allocated::bigint FROM catalog.machines WHERE id = '{}'",
            w.machine
        )),
        0
    );
    assert_eq!(
        w.count(&format!(
            "SELECT count(*) FROM catalog.allocations WHERE reservation_id = '{r}' AND released_at IS NULL"
        )),
        0
    );
    assert_eq!(
        w.count(
            "SELECT count(*) FROM catalog.outbox WHERE routing_key = 'catalog.allocation.preempted'
             AND body->'payload'->>'reason' = 'reservation ended'"
        ),
        2
    );
    assert!(w.flag(&format!(
        "SELECT finished_at IS NOT NULL AND activated_at IS NOT NULL FROM catalog.bookings WHERE reservation_id = '{r}'"
    )));
    assert_eq!(
        code(w.allocate(holder, 1, Some(r)).await),
        ErrorCode::Conflict
    );
    assert_eq!(
        w.allocate(renter, 2, None)
            .await
            .expect("free again")
            .gpu_indices,
        vec![0, 1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carving_and_cancelling_move_booked_hours() {
    let w = World::new("catalog_carve", 2).await;
    let holder = TenantId::new();
    let buyer = TenantId::new();
    let parent = ReservationId::new();
    w.book(parent, holder, 2, (2, 10)).await.expect("booked");
    let carve = |child, from, to| CarveBookingRequest {
        child_reservation_id: child,
        child_tenant_id: buyer,
        starts_at: hour(from),
        ends_at: hour(to),
    };
    let child = ReservationId::new();
    let sold = bookings::carve(&w.db, parent, carve(child, 4, 6))
        .await
        .expect("carved");
    assert_eq!(sold.tenant_id, buyer);
    assert_eq!(sold.gpu_indices, vec![0, 1]);
    assert_eq!((sold.starts_at, sold.ends_at), (hour(4), hour(6)));
    // Idempotent by child; the same child for other hours is a conflict.
    assert_eq!(
        bookings::carve(&w.db, parent, carve(child, 4, 6))
            .await
            .expect("replay"),
        sold
    );
    assert_eq!(
        code(bookings::carve(&w.db, parent, carve(child, 7, 8)).await),
        ErrorCode::Conflict
    );
    // Hours sold already, outside the block, or not whole are refused.
    for (from, to) in [(5, 7), (9, 11), (6, 6)] {
        let refused = bookings::carve(&w.db, parent, carve(ReservationId::new(), from, to)).await;
        assert_eq!(code(refused), ErrorCode::Validation, "{from}..{to}");
    }
    let periods = |id: ReservationId| {
        w.text(&format!(
            "SELECT string_agg(DISTINCT extract(epoch FROM lower(period) - now())::bigint / 3600 || '-' ||
                    extract(epoch FROM upper(period) - now())::bigint / 3600, ',')
             FROM catalog.booked_gpus WHERE reservation_id = '{id}'"
        ))
    };
    let seen = bookings::get(&w.db, parent).await.expect("booking");
    assert_eq!(
        seen.carved,
        vec![HourRange {
            starts_at: hour(4),
            ends_at: hour(6)
        }]
    );
    assert_eq!(
        w.count(&format!(
            "SELECT count(*) FROM catalog.booked_gpus WHERE reservation_id = '{parent}'"
        )),
        4
    );
    let before = periods(parent);

    // Cancelling from an hour on keeps what comes before, idempotently.
    let cancel = || CancelBookingRequest {
        from: Some(hour(7)),
        reason: "the host cancelled".into(),
    };
    let cancelled = bookings::cancel(&w.db, EXCHANGE, parent, cancel())
        .await
        .expect("cancelled");
    assert_eq!(cancelled.cancelled_from, Some(hour(7)));
    assert_eq!(
        bookings::cancel(&w.db, EXCHANGE, parent, cancel())
            .await
            .expect("again"),
        cancelled
    );
    assert_ne!(periods(parent), before);
    assert!(w.flag(&format!(
        "SELECT max(upper(period)) = '{}'::timestamptz FROM catalog.booked_gpus WHERE reservation_id = '{parent}'",
        hour(7).to_rfc3339()
    )));
    // A cancelled reservation's hours are not sold.
    assert_eq!(
        code(bookings::carve(&w.db, parent, carve(ReservationId::new(), 2, 3)).await),
        ErrorCode::Validation
    );

    // The machine leaving the market cancels what has not ended, in one event.
    let mut conn = w.conn();
    let ids = conn
        .transaction::<_, Error, _>(|conn| {
            bookings::cancel_machine(conn, EXCHANGE, w.machine, w.host, "unlisted")
        })
        .expect("cancelled");
    assert_eq!(ids.len(), 2);
    assert_eq!(w.outbox("catalog.bookings.cancelled"), 1);
    assert_eq!(w.count("SELECT count(*) FROM catalog.booked_gpus"), 0);
    assert_eq!(
        bookings::get(&w.db, child)
            .await
            .expect("child")
            .cancelled_from,
        Some(hour(4))
    );
    assert_eq!(
        code(bookings::get(&w.db, ReservationId::new()).await),
        ErrorCode::NotFound
    );
}

#![allow(clippy::expect_used, clippy::unwrap_used)] // Tests: a failed expectation is the failure.

//! Traffic samples that reach metering before the instance's first event
//! (a host's agent knows the instance from its provisioning command, before
//! ordering's `storage_started` is handled) wait unscreened, and the first
//! event judges them against the link exactly as later samples are judged:
//! a waiting terabyte is refused, a plausible waiting sample is billed.
//! Real Postgres, metering's own handlers.

use chrono::{DateTime, Duration, Utc};
use contracts::Envelope;
use contracts::events::{INSTANCE_TRAFFIC, InstanceStorageStarted, InstanceTraffic};
use contracts::ids::{InstanceId, MachineId, TenantId};
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl};
use gpumarket_metering::meters::{apply_storage, apply_traffic};
use platform::test_db::TestDb;
use rust_decimal::Decimal;
use uuid::Uuid;

const EXCHANGE: &str = "gpumarket.events";

#[derive(QueryableByName)]
struct N {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

fn number(conn: &mut PgConnection, sql: &str) -> i64 {
    diesel::sql_query(sql).get_result::<N>(conn).expect(sql).n
}

struct Instance {
    id: Uuid,
    machine: Uuid,
    started_at: DateTime<Utc>,
}

impl Instance {
    fn new(started_at: DateTime<Utc>) -> Self {
        Self {
            id: Uuid::now_v7(),
            machine: Uuid::now_v7(),
            started_at,
        }
    }

    fn started(&self) -> Envelope {
        let payload = InstanceStorageStarted {
            instance_id: InstanceId(self.id),
            tenant_id: TenantId(Uuid::now_v7()),
            host_tenant_id: TenantId(Uuid::now_v7()),
            machine_id: MachineId(self.machine),
            gpu_model: "RTX 4090".into(),
            disk_gib: 0,
            storage_price_per_gb_month: Decimal::ZERO,
            bandwidth_up_price_per_tb: Decimal::new(95, 1),
            bandwidth_down_price_per_tb: Decimal::new(125, 2),
            currency: "USD".into(),
            started_at: self.started_at,
        };
        Envelope::new(
            contracts::events::kinds::INSTANCE_STORAGE_STARTED,
            Utc::now(),
            None,
            None,
            &payload,
        )
        .expect("envelope")
    }

    /// A sample of `machine`'s agent (10 Mbit/s each way, as the catalog
    /// attaches it), sent now.
    fn sample(&self, machine: Uuid, seq: i64, tx: i64, rx: i64) -> Envelope {
        let payload = InstanceTraffic {
            instance_id: InstanceId(self.id),
            machine_id: MachineId(machine),
            boot_id: Uuid::from_u128(7),
            seq,
            sent_at: Utc::now(),
            tx_bytes: tx,
            rx_bytes: rx,
            upload_mbps: Some(10),
            download_mbps: Some(10),
        };
        Envelope::new(
            contracts::events::kinds::INSTANCE_TRAFFIC,
            Utc::now(),
            None,
            None,
            &payload,
        )
        .expect("envelope")
    }

    /// What the bandwidth intervals announced so far: (up, down) bytes.
    fn announced(&self, conn: &mut PgConnection) -> (i64, i64) {
        let meter = |conn: &mut PgConnection, m: &str| {
            number(
                conn,
                &format!(
                    "SELECT coalesce(sum(settled_seconds), 0)::bigint AS n FROM metering.intervals \
                     WHERE instance_id = '{}' AND meter = '{m}'",
                    self.id
                ),
            )
        };
        (meter(conn, "bandwidth_up"), meter(conn, "bandwidth_down"))
    }

    fn kept(&self, conn: &mut PgConnection) -> i64 {
        number(
            conn,
            &format!(
                "SELECT count(*) AS n FROM metering.traffic_samples WHERE instance_id = '{}'",
                self.id
            ),
        )
    }
}

fn handle(conn: &mut PgConnection, envelope: &Envelope) {
    conn.transaction::<_, diesel::result::Error, _>(|c| {
        let result = if envelope.kind == INSTANCE_TRAFFIC {
            apply_traffic(c, envelope, EXCHANGE)
        } else {
            apply_storage(c, envelope, EXCHANGE)
        };
        result.expect("handled");
        Ok(())
    })
    .expect("transaction");
}

#[test]
fn a_terabyte_reported_before_the_start_arrives_is_refused_when_it_does() {
    let db = TestDb::new("waiting_traffic").expect("test database");
    let mut conn = db.conn().expect("connect");
    // Started a second ago at 10 Mbit/s: about 1.4 MB could have moved
    // (plus the published 64 MB slack), not a terabyte.
    let instance = Instance::new(Utc::now() - Duration::seconds(1));
    let tb = 1_000_000_000_000;
    handle(&mut conn, &instance.sample(instance.machine, 1, tb, tb));
    assert_eq!(instance.kept(&mut conn), 1, "it waits for the start");
    assert_eq!(instance.announced(&mut conn), (0, 0));

    handle(&mut conn, &instance.started());
    assert_eq!(
        instance.kept(&mut conn),
        0,
        "refused once the start is known"
    );
    assert_eq!(instance.announced(&mut conn), (0, 0), "nothing billed");
    assert_eq!(
        number(
            &mut conn,
            "SELECT count(*) AS n FROM metering.outbox WHERE routing_key = 'metering.usage.recorded'"
        ),
        0
    );

    // A later plausible sample counts, and alone.
    handle(&mut conn, &instance.sample(instance.machine, 2, 1000, 4000));
    assert_eq!(instance.announced(&mut conn), (1000, 4000));
}

#[test]
fn a_plausible_sample_that_waited_is_billed_and_another_machines_is_not() {
    let db = TestDb::new("waiting_traffic").expect("test database");
    let mut conn = db.conn().expect("connect");
    let instance = Instance::new(Utc::now() - Duration::seconds(30));
    handle(&mut conn, &instance.sample(instance.machine, 1, 1000, 4000));
    handle(&mut conn, &instance.sample(Uuid::now_v7(), 2, 500, 500));
    assert_eq!(instance.kept(&mut conn), 2);
    assert_eq!(instance.announced(&mut conn), (0, 0));

    handle(&mut conn, &instance.started());
    assert_eq!(
        instance.kept(&mut conn),
        1,
        "the other machine's sample is gone"
    );
    assert_eq!(instance.announced(&mut conn), (1000, 4000));

    // Two waiting samples that each fit alone but not together: the first
    // to arrive counts, the second is refused (the link is judged across
    // samples, waiting or not).
    let later = Instance::new(Utc::now() - Duration::seconds(1));
    let near_slack = 60_000_000;
    handle(&mut conn, &later.sample(later.machine, 1, near_slack, 0));
    let mut second = later.sample(later.machine, 2, near_slack, 0);
    // A counter reset (lower than the first): counted whole on top of it.
    second = {
        let mut p: InstanceTraffic = second.payload().expect("payload");
        p.boot_id = Uuid::from_u128(8);
        p.tx_bytes = near_slack - 1;
        Envelope::new(
            contracts::events::kinds::INSTANCE_TRAFFIC,
            Utc::now(),
            None,
            None,
            &p,
        )
        .expect("envelope")
    };
    handle(&mut conn, &second);
    handle(&mut conn, &later.started());
    assert_eq!(later.kept(&mut conn), 1);
    assert_eq!(later.announced(&mut conn), (near_slack, 0));
}

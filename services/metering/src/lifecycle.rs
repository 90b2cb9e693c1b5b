//! The metering consumer's handler: each lifecycle event goes to the meter
//! it concerns, inside the inbox's transaction. A `running` or `stopped`
//! event opens or closes the run's GPU interval (`intervals`); storage and
//! traffic events go to their meters (`meters`).

use contracts::Envelope;
use contracts::events::{
    INSTANCE_RUNNING, INSTANCE_STOPPED, INSTANCE_STORAGE_ENDED, INSTANCE_STORAGE_STARTED,
    INSTANCE_TRAFFIC, InstanceRunning, InstanceStopped,
};
use diesel::prelude::*;
use diesel::upsert::excluded;
use platform::consumer::HandlerError;
use rust_decimal::Decimal;
use schema::metering::intervals;
use uuid::Uuid;

use crate::intervals::{GPU, close_if_complete};

/// The effect of one lifecycle event; runs in the inbox's transaction.
pub fn apply_event(
    conn: &mut PgConnection,
    envelope: &Envelope,
    events_exchange: &str,
) -> Result<(), HandlerError> {
    let bad = |e: serde_json::Error| {
        HandlerError::Permanent(format!("bad {} payload: {e}", envelope.kind))
    };
    let interval_id = match envelope.kind.as_str() {
        INSTANCE_RUNNING => {
            let p: InstanceRunning = envelope.payload().map_err(bad)?;
            let id = diesel::insert_into(intervals::table)
                .values((
                    intervals::id.eq(Uuid::now_v7()),
                    intervals::instance_id.eq(p.instance_id),
                    intervals::tenant_id.eq(p.tenant_id),
                    intervals::host_tenant_id.eq(p.host_tenant_id),
                    intervals::meter.eq(GPU),
                    intervals::run_seq.eq(p.run_seq),
                    intervals::started_at.eq(p.running_at),
                    intervals::gpu_count.eq(p.gpu_count),
                    intervals::price_per_hour.eq(p.price_per_gpu_hour * Decimal::from(p.gpu_count)),
                    intervals::currency.eq(&p.currency),
                    intervals::machine_id.eq(p.machine_id),
                    intervals::gpu_model.eq((!p.gpu_model.is_empty()).then_some(&p.gpu_model)),
                    intervals::correlation_id.eq(&envelope.correlation_id),
                ))
                .on_conflict((intervals::instance_id, intervals::meter, intervals::run_seq))
                .do_update()
                .set((
                    intervals::started_at.eq(excluded(intervals::started_at)),
                    intervals::host_tenant_id.eq(excluded(intervals::host_tenant_id)),
                    intervals::gpu_count.eq(excluded(intervals::gpu_count)),
                    intervals::price_per_hour.eq(excluded(intervals::price_per_hour)),
                    intervals::currency.eq(excluded(intervals::currency)),
                    intervals::machine_id.eq(excluded(intervals::machine_id)),
                    intervals::gpu_model.eq(excluded(intervals::gpu_model)),
                ))
                .returning(intervals::id)
                .get_result::<Uuid>(conn)?;
            // The `running` event opened the interval, even when the stop
            // arrived first and created the row: its id is the interval's.
            if let Some(cid) = &envelope.correlation_id {
                diesel::update(intervals::table.find(id))
                    .set(intervals::correlation_id.eq(cid))
                    .execute(conn)?;
            }
            id
        }
        INSTANCE_STOPPED => {
            let p: InstanceStopped = envelope.payload().map_err(bad)?;
            diesel::insert_into(intervals::table)
                .values((
                    intervals::id.eq(Uuid::now_v7()),
                    intervals::instance_id.eq(p.instance_id),
                    intervals::tenant_id.eq(p.tenant_id),
                    intervals::meter.eq(GPU),
                    intervals::run_seq.eq(p.run_seq),
                    intervals::ended_at.eq(p.stopped_at),
                    // Until the `running` event brings its own.
                    intervals::correlation_id.eq(&envelope.correlation_id),
                ))
                .on_conflict((intervals::instance_id, intervals::meter, intervals::run_seq))
                .do_update()
                .set(intervals::ended_at.eq(excluded(intervals::ended_at)))
                .returning(intervals::id)
                .get_result::<Uuid>(conn)?
        }
        INSTANCE_STORAGE_STARTED | INSTANCE_STORAGE_ENDED => {
            return crate::meters::apply_storage(conn, envelope, events_exchange);
        }
        INSTANCE_TRAFFIC => {
            return crate::meters::apply_traffic(conn, envelope, events_exchange);
        }
        // Other lifecycle events carry nothing to meter.
        _ => return Ok(()),
    };
    close_if_complete(
        conn,
        interval_id,
        events_exchange,
        envelope.correlation_id.clone(),
    )
}

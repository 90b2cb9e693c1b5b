//! A machine's booking calendar (`MACHINE_CALENDAR`, docs/reservations.md):
//! per whole hour of `[from, to)` (at most 31 days), the GPUs in whole-GPU
//! mode not booked in that hour; for the machine's host, each booked range
//! too. Anyone sees a listed machine's calendar, only its host an unlisted one's.

use chrono::{DateTime, Duration, Utc};
use contracts::ids::{MachineId, ReservationId, TenantId};
use contracts::reservations::{
    CalendarBooking, CalendarHour, CalendarQuery, MachineCalendar, whole_hour,
};
use diesel::prelude::*;
use diesel::sql_types::{Int4, Numeric, Timestamptz, Uuid as SqlUuid};
use platform::Db;
use rust_decimal::Decimal;
use schema::catalog::machines;
use uuid::Uuid;

use crate::Error;

/// The longest calendar one request reads.
const MAX_DAYS: i64 = 31;

fn validate(q: &CalendarQuery) -> Result<(), Error> {
    if !whole_hour(q.from) || !whole_hour(q.to) {
        return Err(Error::Validation(
            "from and to must be whole UTC hours (minutes, seconds and fractions 0)".into(),
        ));
    }
    if q.to <= q.from {
        return Err(Error::Validation("to must be after from".into()));
    }
    if q.to - q.from > Duration::days(MAX_DAYS) {
        return Err(Error::Validation(format!(
            "a calendar covers at most {MAX_DAYS} days"
        )));
    }
    Ok(())
}

#[derive(QueryableByName)]
struct HourRow {
    #[diesel(sql_type = Timestamptz)]
    starts_at: DateTime<Utc>,
    #[diesel(sql_type = Int4)]
    booked: i32,
}

#[derive(QueryableByName)]
struct BookedRow {
    #[diesel(sql_type = SqlUuid)]
    reservation_id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    tenant_id: Uuid,
    #[diesel(sql_type = Int4)]
    gpu_index: i32,
    #[diesel(sql_type = Timestamptz)]
    starts_at: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    ends_at: DateTime<Utc>,
    #[diesel(sql_type = Numeric)]
    price_per_gpu_hour: Decimal,
}

/// `MACHINE_CALENDAR`.
pub async fn calendar(
    db: &Db,
    machine_id: MachineId,
    q: CalendarQuery,
) -> Result<MachineCalendar, Error> {
    validate(&q)?;
    db.run(move |conn| {
        type Row = (TenantId, bool, i32, i32, String);
        let machine: Option<Row> = machines::table
            .find(machine_id)
            .filter(machines::deleted_at.is_null())
            .select((
                machines::host_tenant_id,
                machines::listed,
                machines::gpu_count,
                machines::mig_gpus,
                machines::currency,
            ))
            .first(conn)
            .optional()?;
        let is_host = |host: TenantId| q.host_tenant_id == Some(host);
        let Some((host, _, gpu_count, mig_gpus, currency)) =
            machine.filter(|&(host, listed, ..)| listed || is_host(host))
        else {
            return Err(Error::NotFound(format!("machine {machine_id} not found")));
        };
        let whole = (gpu_count - mig_gpus).max(0);
        let hours: Vec<HourRow> = diesel::sql_query(
            "SELECT h AS starts_at, count(DISTINCT g.gpu_index)::int4 AS booked
             FROM generate_series($2::timestamptz, $3::timestamptz - interval '1 hour', interval '1 hour') AS h
             LEFT JOIN catalog.booked_gpus g
               ON g.machine_id = $1 AND g.period && tstzrange(h, h + interval '1 hour', '[)')
             GROUP BY h ORDER BY h",
        )
        .bind::<SqlUuid, _>(machine_id)
        .bind::<Timestamptz, _>(q.from)
        .bind::<Timestamptz, _>(q.to)
        .load(conn)?;
        let bookings = if is_host(host) {
            let rows: Vec<BookedRow> = diesel::sql_query(
                "SELECT g.reservation_id, b.tenant_id, g.gpu_index::int4 AS gpu_index,
                        lower(g.period) AS starts_at, upper(g.period) AS ends_at, b.price_per_gpu_hour
                 FROM catalog.booked_gpus g
                 JOIN catalog.bookings b ON b.reservation_id = g.reservation_id
                 WHERE g.machine_id = $1 AND g.period && tstzrange($2, $3, '[)')
                 ORDER BY lower(g.period), g.gpu_index",
            )
            .bind::<SqlUuid, _>(machine_id)
            .bind::<Timestamptz, _>(q.from)
            .bind::<Timestamptz, _>(q.to)
            .load(conn)?;
            rows.into_iter()
                .map(|r| CalendarBooking {
                    reservation_id: ReservationId(r.reservation_id),
                    tenant_id: TenantId(r.tenant_id),
                    gpu_index: u32::try_from(r.gpu_index).unwrap_or(0),
                    starts_at: r.starts_at,
                    ends_at: r.ends_at,
                    price_per_gpu_hour: r.price_per_gpu_hour.normalize(),
                })
                .collect()
        } else {
            Vec::new()
        };
        let terms = crate::reserved_terms::of(conn, machine_id.into_uuid(), &currency)?;
        Ok(MachineCalendar {
            machine_id,
            gpu_count,
            from: q.from,
            to: q.to,
            hours: hours
                .into_iter()
                .map(|h| CalendarHour {
                    starts_at: h.starts_at,
                    free_gpus: (whole - h.booked).max(0),
                })
                .collect(),
            bookings,
            terms,
        })
    })
    .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn query(from: DateTime<Utc>, to: DateTime<Utc>) -> CalendarQuery {
        CalendarQuery {
            from,
            to,
            host_tenant_id: None,
        }
    }

    #[test]
    fn a_calendar_is_whole_hours_up_to_31_days() {
        let from = Utc.with_ymd_and_hms(2027, 1, 4, 0, 0, 0).single().unwrap();
        assert!(validate(&query(from, from + Duration::days(31))).is_ok());
        assert!(validate(&query(from, from + Duration::hours(1))).is_ok());
        assert!(validate(&query(from, from + Duration::days(31) + Duration::hours(1))).is_err());
        assert!(validate(&query(from, from)).is_err());
        assert!(
            validate(&query(
                from + Duration::minutes(5),
                from + Duration::hours(2)
            ))
            .is_err()
        );
    }
}

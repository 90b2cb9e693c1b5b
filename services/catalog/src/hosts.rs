//! Host organisations as the catalog sees them: their profile and the
//! verification an operator gives or takes away, with a reason.

use contracts::FieldErrors;
use contracts::api::{HostProfile, SetVerificationRequest, UpdateHostProfileRequest, Verification};
use contracts::ids::TenantId;
use diesel::prelude::*;
use diesel::upsert::excluded;
use platform::Db;
use schema::catalog::host_profiles;
use uuid::Uuid;

use crate::Error;

#[derive(Queryable, Selectable)]
#[diesel(table_name = host_profiles)]
struct ProfileRow {
    tenant_id: TenantId,
    legal_name: Option<String>,
    country: Option<String>,
    payout_currency: Option<String>,
    verification: String,
    verification_reason: Option<String>,
    updated_at: chrono::DateTime<chrono::Utc>,
}

pub fn verification(s: &str) -> Verification {
    match s {
        "verified" => Verification::Verified,
        "suspended" => Verification::Suspended,
        _ => Verification::Unverified,
    }
}

fn verification_name(v: Verification) -> &'static str {
    match v {
        Verification::Unverified => "unverified",
        Verification::Verified => "verified",
        Verification::Suspended => "suspended",
    }
}

fn profile(conn: &mut PgConnection, tenant_id: TenantId) -> QueryResult<HostProfile> {
    let row: Option<ProfileRow> = host_profiles::table
        .find(tenant_id)
        .select(ProfileRow::as_select())
        .first(conn)
        .optional()?;
    Ok(match row {
        Some(r) => HostProfile {
            tenant_id: r.tenant_id,
            legal_name: r.legal_name,
            country: r.country,
            payout_currency: r.payout_currency,
            verification: verification(&r.verification),
            verification_reason: r.verification_reason,
            updated_at: r.updated_at,
        },
        None => HostProfile {
            tenant_id,
            legal_name: None,
            country: None,
            payout_currency: None,
            verification: Verification::Unverified,
            verification_reason: None,
            updated_at: contracts::time::now(),
        },
    })
}

pub async fn get(db: &Db, tenant_id: TenantId) -> Result<HostProfile, Error> {
    db.run(move |conn| Ok(profile(conn, tenant_id)?)).await
}

pub async fn update(
    db: &Db,
    tenant_id: TenantId,
    req: UpdateHostProfileRequest,
) -> Result<HostProfile, Error> {
    let legal_name = req.legal_name.trim().to_owned();
    let country = req.country.trim().to_uppercase();
    let currency = req.payout_currency.trim().to_uppercase();
    // All at once: the portal's profile form marks every wrong field.
    let mut errors = FieldErrors::new();
    errors.check(
        !legal_name.is_empty() && legal_name.chars().count() <= 300,
        "legalName",
        "1 to 300 characters",
    );
    errors.check(
        country.len() == 2 && country.chars().all(|c| c.is_ascii_uppercase()),
        "country",
        "an ISO 3166-1 alpha-2 code such as US",
    );
    errors.check(
        currency.len() == 3 && currency.chars().all(|c| c.is_ascii_uppercase()),
        "payoutCurrency",
        "an ISO 4217 code such as USD",
    );
    errors.into_result()?;
    db.tx(move |conn| {
        diesel::insert_into(host_profiles::table)
            .values((
                host_profiles::tenant_id.eq(tenant_id),
                host_profiles::legal_name.eq(&legal_name),
                host_profiles::country.eq(&country),
                host_profiles::payout_currency.eq(&currency),
            ))
            .on_conflict(host_profiles::tenant_id)
            .do_update()
            .set((
                host_profiles::legal_name.eq(excluded(host_profiles::legal_name)),
                host_profiles::country.eq(excluded(host_profiles::country)),
                host_profiles::payout_currency.eq(excluded(host_profiles::payout_currency)),
                host_profiles::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)?;
        Ok(profile(conn, tenant_id)?)
    })
    .await
}

/// An operator's verdict on a host: verified or suspended needs a reason.
pub async fn set_verification(
    db: &Db,
    events_exchange: &str,
    tenant_id: TenantId,
    operator_id: Option<Uuid>,
    req: SetVerificationRequest,
) -> Result<HostProfile, Error> {
    let reason = req.reason.trim().to_owned();
    if reason.is_empty() || reason.chars().count() > 1000 {
        return Err(Error::Validation("reason: 1 to 1000 characters".into()));
    }
    let state = verification_name(req.verification);
    let exchange = events_exchange.to_owned();
    db.tx(move |conn| {
        diesel::insert_into(host_profiles::table)
            .values((
                host_profiles::tenant_id.eq(tenant_id),
                host_profiles::verification.eq(state),
                host_profiles::verification_reason.eq(&reason),
                host_profiles::verified_by.eq(operator_id),
            ))
            .on_conflict(host_profiles::tenant_id)
            .do_update()
            .set((
                host_profiles::verification.eq(excluded(host_profiles::verification)),
                host_profiles::verification_reason.eq(excluded(host_profiles::verification_reason)),
                host_profiles::verified_by.eq(excluded(host_profiles::verified_by)),
                host_profiles::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)?;
        // The host's webhooks (docs/webhooks.md).
        let event = contracts::events::HostVerification {
            host_tenant_id: tenant_id,
            verification: state.to_owned(),
            reason: reason.clone(),
            at: contracts::time::now(),
            sequence: platform::sequence::next(
                conn,
                crate::SCHEMA,
                &contracts::events::resource::host(tenant_id.into()),
            )?,
        };
        let envelope = contracts::Envelope::new(
            contracts::events::kinds::HOST_VERIFICATION,
            event.at,
            Some(tenant_id),
            platform::http::current_correlation_id(),
            &event,
        )
        .map_err(platform::PlatformError::from)?;
        platform::outbox::enqueue(
            conn,
            crate::SCHEMA,
            &exchange,
            contracts::events::HOST_VERIFICATION,
            &envelope,
        )?;
        Ok(profile(conn, tenant_id)?)
    })
    .await
}

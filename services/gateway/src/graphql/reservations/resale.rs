//! Resale of reserved hours: a holder lists future whole hours of a
//! reservation (all its GPUs) at a price of their choosing
//! (`listReservationHours`), sees and withdraws their listings
//! (`myListings`, `withdrawListing`); any signed-in caller reads the open
//! listings (`resaleListings`), and a renter buys one
//! (`buyReservationHours`): the hours become the buyer's new reservation,
//! the seller is paid less the published resale fee.

use async_graphql::{Context, ID, InputObject, Object, SimpleObject};
use chrono::{DateTime, Utc};
use contracts::endpoints;
use contracts::ids::{ResaleListingId, ReservationId};
use contracts::reservations as rsv;
use rust_decimal::Decimal;

use super::{ListingState, Reservation, Viewer};
use crate::auth::{self, Access};
use crate::clients;
use crate::error::{GatewayError, GqlResult};
use crate::validate;

/// Future whole hours of a reservation offered for sale.
#[derive(SimpleObject)]
pub struct ResaleListing {
    id: ID,
    reservation_id: ID,
    machine_id: ID,
    gpu_model: String,
    /// Every GPU of the reservation: a listing sells them all.
    gpu_count: i32,
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
    hours: i32,
    /// The asking price per GPU-hour.
    price_per_gpu_hour: Decimal,
    /// What the buyer pays: `pricePerGpuHour × gpuCount × hours`.
    amount: Decimal,
    currency: String,
    state: ListingState,
    created_at: DateTime<Utc>,
}

impl From<rsv::ResaleListing> for ResaleListing {
    fn from(l: rsv::ResaleListing) -> Self {
        // The seller's tenant is never shown: a buyer needs the hours, not
        // who sells them, and the seller knows its own listings.
        Self {
            id: l.id.into(),
            reservation_id: l.reservation_id.into(),
            machine_id: l.machine_id.into(),
            hours: i32::try_from(rsv::hours(l.starts_at, l.ends_at).max(0)).unwrap_or(i32::MAX),
            gpu_model: l.gpu_model,
            gpu_count: l.gpu_count,
            starts_at: l.starts_at,
            ends_at: l.ends_at,
            price_per_gpu_hour: l.price_per_gpu_hour,
            amount: l.amount,
            currency: l.currency,
            state: l.state,
            created_at: l.created_at,
        }
    }
}

/// Hours of one of the caller's reservations to sell.
#[derive(InputObject)]
pub struct ListReservationHoursInput {
    reservation_id: ID,
    /// A whole UTC hour of the block, in the future.
    starts_at: DateTime<Utc>,
    /// A whole UTC hour after `startsAt`, within the block.
    ends_at: DateTime<Utc>,
    /// The asking price per GPU-hour, 0 to 1000 with at most 9 decimal places.
    price_per_gpu_hour: Decimal,
}

/// Which open listings to show; every constraint given must hold.
#[derive(InputObject, Default)]
pub struct ResaleListingFilter {
    /// One GPU model (exact catalog name, any case).
    gpu_model: Option<String>,
    /// Listings whose hours start at or after this instant.
    from: Option<DateTime<Utc>>,
    /// At least this many GPUs (1 to 64).
    min_gpus: Option<i32>,
}

impl ResaleListingFilter {
    fn into_search(self) -> Result<rsv::ListingSearch, GatewayError> {
        let gpu_model = self
            .gpu_model
            .map(|m| m.trim().to_owned())
            .filter(|m| !m.is_empty());
        if let Some(model) = &gpu_model {
            validate::text("gpuModel", model, validate::MAX_GPU_MODEL_LEN)?;
        }
        if let Some(min) = self.min_gpus {
            validate::within("minGpus", min, 1, validate::MAX_GPU_COUNT)?;
        }
        Ok(rsv::ListingSearch {
            gpu_model,
            from: self.from,
            min_gpus: self.min_gpus,
        })
    }
}

#[derive(InputObject)]
pub struct BuyReservationHoursInput {
    listing_id: ID,
    /// Repeating a purchase with the same key returns the same reservation.
    idempotency_key: String,
}

#[derive(Default)]
pub struct ResaleQuery;

#[Object]
impl ResaleQuery {
    /// The caller's listings, newest first, in every state.
    async fn my_listings(&self, ctx: &Context<'_>) -> GqlResult<Vec<ResaleListing>> {
        let principal = auth::authorize(ctx, Access::Reservations).await?;
        let listings = clients::from_context(ctx)?
            .ordering
            .call(
                endpoints::ordering::MY_LISTINGS,
                (),
                &rsv::ReservationQuery {
                    tenant_id: principal.tenant_id,
                },
            )
            .await?;
        Ok(listings.into_iter().map(Into::into).collect())
    }

    /// Open listings whose hours have not started, soonest first. Any
    /// signed-in caller.
    #[graphql(
        complexity = "crate::graphql::extensions::limits::EXPENSIVE_FIELD + child_complexity"
    )]
    async fn resale_listings(
        &self,
        ctx: &Context<'_>,
        filter: Option<ResaleListingFilter>,
    ) -> GqlResult<Vec<ResaleListing>> {
        auth::principal(ctx).await?;
        let search = filter.unwrap_or_default().into_search()?;
        let listings = clients::from_context(ctx)?
            .ordering
            .call(endpoints::ordering::SEARCH_LISTINGS, (), &search)
            .await?;
        Ok(listings.into_iter().map(Into::into).collect())
    }
}

#[derive(Default)]
pub struct ResaleMutation;

#[Object]
impl ResaleMutation {
    /// Offers future whole hours of one of the caller's reservations (all
    /// its GPUs) at a price per GPU-hour. `VALIDATION` for hours outside
    /// the block, started, already sold or listed; `NOT_FOUND` for a
    /// reservation that is not the caller's.
    async fn list_reservation_hours(
        &self,
        ctx: &Context<'_>,
        input: ListReservationHoursInput,
    ) -> GqlResult<ResaleListing> {
        let principal = auth::authorize(ctx, Access::Rent).await?;
        let reservation_id = ReservationId(validate::id("reservationId", &input.reservation_id)?);
        validate::future_hours(
            "startsAt",
            input.starts_at,
            "endsAt",
            input.ends_at,
            Utc::now(),
        )?;
        validate::money(
            "pricePerGpuHour",
            input.price_per_gpu_hour,
            contracts::bounds::GPU_HOUR_PRICE,
        )?;
        let listing = clients::from_context(ctx)?
            .ordering
            .call(
                endpoints::ordering::CREATE_LISTING,
                reservation_id,
                &rsv::CreateListingRequest {
                    tenant_id: principal.tenant_id,
                    starts_at: input.starts_at,
                    ends_at: input.ends_at,
                    price_per_gpu_hour: input.price_per_gpu_hour,
                },
            )
            .await?;
        Ok(listing.into())
    }

    /// Withdraws one of the caller's open listings. `CONFLICT` once it is
    /// sold (or being sold); `NOT_FOUND` for a listing not the caller's.
    async fn withdraw_listing(&self, ctx: &Context<'_>, id: ID) -> GqlResult<ResaleListing> {
        let principal = auth::authorize(ctx, Access::Rent).await?;
        let id = ResaleListingId(validate::id("id", &id)?);
        let listing = clients::from_context(ctx)?
            .ordering
            .call(
                endpoints::ordering::WITHDRAW_LISTING,
                id,
                &rsv::ReservationQuery {
                    tenant_id: principal.tenant_id,
                },
            )
            .await?;
        Ok(listing.into())
    }

    /// Buys a listing's hours: they become the caller's new reservation on
    /// the same GPUs (`parentId` the seller's), the listing's `amount` moves
    /// from the caller's balance to the seller less the resale fee.
    /// `INSUFFICIENT_FUNDS` without the balance; `CONFLICT` when it is no
    /// longer open (sold, withdrawn, or its hours started).
    async fn buy_reservation_hours(
        &self,
        ctx: &Context<'_>,
        input: BuyReservationHoursInput,
    ) -> GqlResult<Reservation> {
        let principal = auth::authorize(ctx, Access::Rent).await?;
        let listing_id = ResaleListingId(validate::id("listingId", &input.listing_id)?);
        validate::idempotency_key("idempotencyKey", &input.idempotency_key)?;
        let reservation = clients::from_context(ctx)?
            .ordering
            .call(
                endpoints::ordering::BUY_LISTING,
                listing_id,
                &rsv::BuyListingRequest {
                    tenant_id: principal.tenant_id,
                    user_id: principal.user_id,
                    idempotency_key: input.idempotency_key,
                },
            )
            .await?;
        Ok(Reservation::new(
            reservation,
            Viewer::Renter(principal.tenant_id),
            Utc::now(),
        ))
    }
}

// The billing page's reserved-capacity operations (Reservations.tsx), typed
// by `npm run codegen` from api-specs/graphql/schema.graphql.
import { graphql } from '../gql';

export const RenterReservationFieldsFragment = graphql(`
  fragment RenterReservationFields on Reservation {
    id
    machineId
    gpuModel
    gpuCount
    gpuIndices
    startsAt
    endsAt
    hours
    hoursLeft
    pricePerGpuHour
    amount
    currency
    state
    parentId
    reason
    sold {
      startsAt
      endsAt
    }
    escrow {
      amount
      released
      fees
      refunded
      penalty
      remaining
      state
    }
  }
`);

export const ResaleListingFieldsFragment = graphql(`
  fragment ResaleListingFields on ResaleListing {
    id
    reservationId
    machineId
    gpuModel
    gpuCount
    startsAt
    endsAt
    hours
    pricePerGpuHour
    amount
    currency
    state
    createdAt
  }
`);

/**
 * The renter's reservations with their escrow (billing is asked once for
 * the list), its listings, the market's open listings from `$from` on, and
 * the published resale fee.
 */
export const BillingReservations = graphql(`
  query BillingReservations($from: DateTime!) {
    reservations {
      ...RenterReservationFields
    }
    myListings {
      ...ResaleListingFields
    }
    resaleListings(filter: { from: $from }) {
      ...ResaleListingFields
    }
    reservationTerms {
      resaleFeeRate
      cancellationPenaltyRate
    }
  }
`);

export const ListReservationHours = graphql(`
  mutation ListReservationHours($input: ListReservationHoursInput!) {
    listReservationHours(input: $input) {
      ...ResaleListingFields
    }
  }
`);

export const WithdrawListing = graphql(`
  mutation WithdrawListing($id: ID!) {
    withdrawListing(id: $id) {
      ...ResaleListingFields
    }
  }
`);

export const BuyReservationHours = graphql(`
  mutation BuyReservationHours($input: BuyReservationHoursInput!) {
    buyReservationHours(input: $input) {
      ...RenterReservationFields
    }
  }
`);

// The portal's reserved-capacity operations (MachineReservations.tsx), typed
// by `npm run codegen` from api-specs/graphql/schema.graphql.
import { graphql } from '../gql';

export const HostReservationFieldsFragment = graphql(`
  fragment HostReservationFields on Reservation {
    id
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
    escrow {
      released
      fees
      refunded
      remaining
      state
    }
  }
`);

/**
 * One machine's reservations section: its terms and calendar over
 * `[from, to)`, the blocks booked on it, what is still to come from escrow
 * (`myMachines` asks billing once for every machine), and the published
 * penalty a cancellation costs.
 */
export const HostMachineReservations = graphql(`
  query HostMachineReservations($machineId: ID!, $from: DateTime!, $to: DateTime!) {
    machineCalendar(machineId: $machineId, from: $from, to: $to) {
      gpuCount
      from
      to
      hours {
        startsAt
        freeGpus
      }
      bookings {
        reservationId
        gpuIndex
        startsAt
        endsAt
      }
      terms {
        pricePerGpuHour
        maxLeadDays
        minBlockHours
        currency
      }
    }
    machineReservations(machineId: $machineId) {
      ...HostReservationFields
    }
    myMachines {
      id
      reservedEarningsToCome {
        amount
        currency
        blocks
      }
    }
    reservationTerms {
      feeRate
      cancellationPenaltyRate
    }
  }
`);

export const SetReservedTerms = graphql(`
  mutation SetReservedTerms($machineId: ID!, $terms: ReservedTermsInput) {
    setReservedTerms(machineId: $machineId, terms: $terms) {
      pricePerGpuHour
      maxLeadDays
      minBlockHours
      currency
    }
  }
`);

export const CancelReservation = graphql(`
  mutation CancelReservation($id: ID!, $reason: String!) {
    cancelReservation(id: $id, reason: $reason) {
      ...HostReservationFields
    }
  }
`);

// The top-up card's operations (TopUp.tsx), typed by `npm run codegen` from
// api-specs/graphql/schema.graphql.
import { graphql } from '../gql';

/**
 * Whether card top-ups are configured (the public terms), and whether the
 * caller's tenant is a renter (only renters top up).
 */
export const TopUpPlatform = graphql(`
  query TopUpPlatform {
    platform {
      currency
      stripePublishableKey
    }
    me {
      tenantRoles
    }
  }
`);

/** The balance and past top-ups, polled while a payment's credit is awaited. */
export const TopUpState = graphql(`
  query TopUpState {
    balance {
      amount
      currency
    }
    topUps {
      id
      amount
      currency
      status
      createdAtUtc
      succeededAtUtc
    }
  }
`);

export const TopUpCreate = graphql(`
  mutation TopUpCreate($amount: Decimal!, $idempotencyKey: String) {
    createTopUp(amount: $amount, idempotencyKey: $idempotencyKey) {
      id
      amount
      currency
      status
      clientSecret
      paymentIntentId
      createdAtUtc
    }
  }
`);

// The billing dashboard's operations, typed by `npm run codegen` from
// api-specs/graphql/schema.graphql (codegen.ts picks up every src/**/*.ts).
import { graphql } from '../gql';

export const BillingLogIn = graphql(`
  mutation BillingLogIn($email: String!, $password: String!) {
    login(email: $email, password: $password) {
      token
      me {
        email
        tenantRoles
      }
    }
  }
`);

export const BillingRunway = graphql(`
  query BillingRunway {
    runway {
      balance
      currency
      burnRatePerHour
      runningInstances
      runwaySeconds
      low
      warnBelowSeconds
    }
  }
`);

export const BillingSpendSeries = graphql(`
  query BillingSpendSeries($from: DateTime!, $to: DateTime!) {
    usageSeries(bucket: DAY, groupBy: GPU_MODEL, fromUtc: $from, toUtc: $to) {
      fromUtc
      toUtc
      currency
      totalSpend
      totalSeconds
      points {
        bucketStartUtc
        key
        seconds
        spend
      }
    }
  }
`);

export const BillingInstances = graphql(`
  query BillingInstances {
    instances {
      id
      gpuModel
      gpuCount
      rental
      pricePerGpuHour
      pricePerHourTotal
      storagePricePerGbMonth
      currency
      state
      statusReason
      runningAtUtc
      stoppedAtUtc
      createdAtUtc
      costSoFar
      billedSeconds
    }
    usage {
      id
      instanceId
      meterKind
      startedAtUtc
      endedAtUtc
      billedSeconds
      pricePerHour
      currency
    }
  }
`);

export const BillingInvoices = graphql(`
  query BillingInvoices {
    invoices {
      id
      number
      state
      periodStartUtc
      periodEndUtc
      currency
      subtotal
      total
      exactTotal
      rounding
      finalizedAtUtc
      paidAtUtc
      lines {
        instanceId
        meterKind
        quantity
        unit
        unitPrice
        pricingUnit
        pricingQuantity
        earlierPeriod
        amount
        exactAmount
      }
    }
  }
`);

export const BillingUsageCsv = graphql(`
  query BillingUsageCsv($invoiceId: ID!) {
    invoiceUsageCsv(invoiceId: $invoiceId)
  }
`);

export const BillingBalanceHistory = graphql(`
  query BillingBalanceHistory($first: Int, $after: String) {
    balanceHistory(first: $first, after: $after) {
      balance
      currency
      nodes {
        kind
        description
        instanceId
        amount
        balanceAfter
        postedAtUtc
        cursor
      }
      pageInfo {
        endCursor
        hasNextPage
      }
    }
  }
`);

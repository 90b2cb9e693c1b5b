// The operators' marketplace overview on the billing dashboard, typed by
// `npm run codegen` from api-specs/graphql/schema.graphql.
import { graphql } from '../gql';

export const OperatorViewer = graphql(`
  query OperatorViewer {
    me {
      operator
      tenantRoles
    }
  }
`);

export const OperatorMarketplace = graphql(`
  query OperatorMarketplace($from: DateTime!, $to: DateTime!, $nearQuotaPercent: Int) {
    marketplaceOverview(fromUtc: $from, toUtc: $to, bucket: DAY, nearQuotaPercent: $nearQuotaPercent) {
      from
      to
      volume {
        currency
        totalVolume
        totalHostEarnings
        totalFees
        totalFeeAdjustments
        totalFeeRevenue
        totalPostings
        totalSeconds
        points {
          bucketStartUtc
          volume
          hostEarnings
          fees
          feeAdjustments
          postings
        }
      }
      gpuSupply {
        atUtc
        listedGpus
        onlineGpus
        rentedGpus
        rentedListedGpus
        models {
          gpuModel
          listedMachines
          listedGpus
          onlineGpus
          rentedGpus
          rentedListedGpus
        }
      }
      nearQuota {
        thresholdPercent
        currency
        tenants {
          tenantId
          tenantName
          dimensions {
            quota
            limit
            used
            percent
          }
        }
      }
      outOfCredit {
        currency
        warnBelowSeconds
        tenants {
          tenantId
          tenantName
          reasons
          balance
          burnPerHour
          runwaySeconds
          lowSinceUtc
          lastChargedAtUtc
        }
      }
    }
  }
`);

/* eslint-disable */
/** Internal type. DO NOT USE DIRECTLY. */
type Exact<T extends { [key: string]: unknown }> = { [K in keyof T]: T[K] };
/** Internal type. DO NOT USE DIRECTLY. */
export type Incremental<T> = T | { [P in keyof T]?: P extends ' $fragmentName' | '__typename' ? T[P] : never };
import type { DocumentTypeDecoration } from '@graphql-typed-document-node/core';
export type BuyReservationHoursInput = {
  /** Repeating a purchase with the same key returns the same reservation. */
  idempotencyKey: string;
  listingId: string | number;
};

export type CreateApiKeyInput = {
  /**
   * Repeating the request with the same key returns the same API key
   * (without its secret); the same key with another name, scopes or user
   * is a CONFLICT.
   */
  idempotencyKey: string;
  name: string;
  /** At most the scopes of the caller. */
  scopes: Array<Scope>;
};

export type CreateWebhookEndpointInput = {
  description?: string | null | undefined;
  /** Empty or absent: every type. */
  eventTypes?: Array<string> | null | undefined;
  /** `https://…`; private, loopback and link-local addresses are refused. */
  url: string;
};

/** Why a tenant is on the out-of-credit list. */
export type CreditRiskReason =
  /**
   * The balance is at or below zero: new orders are refused and running
   * instances are being stopped.
   */
  | 'BALANCE_EXHAUSTED'
  /**
   * Billing's low-runway warning is in force: at the burn it measured,
   * the balance lasts less than `warnBelowSeconds`.
   */
  | 'LOW_RUNWAY';

export type DiskType =
  | 'HDD'
  | 'NVME'
  | 'SSD';

/** Where an escrow is in its life. */
export type EscrowState =
  /** Cancelled: what was not released went back to the holder(s). */
  | 'CANCELLED'
  /** Charged; released to the host as the block runs. */
  | 'HELD'
  /** The block is over and every second is released or refunded. */
  | 'SETTLED';

/** How a host runs one GPU. */
export type GpuMode =
  /**
   * Split into MIG slices, each placed by the platform as orders arrive
   * (best-fit, keeping room for large profiles).
   */
  | 'MIG_AUTO'
  /** Split into MIG slices only where the host's fixed `layout` says. */
  | 'MIG_FIXED'
  /** Rented whole only. */
  | 'WHOLE';

export type HostProfileInput = {
  /** ISO 3166-1 alpha-2. */
  country: string;
  legalName: string;
  /** ISO 4217, e.g. USD. */
  payoutCurrency: string;
};

/**
 * An instance's lifecycle state (DESIGN section 4). Every transition
 * ordering makes is checked against [`InstanceState::can_become`].
 */
export type InstanceState =
  | 'ALLOCATING'
  | 'DEPROVISIONING'
  | 'DESTROYED'
  | 'FAILED'
  | 'HOST_LOST'
  | 'PENDING'
  | 'PREEMPTED'
  | 'PROVISIONING'
  | 'RUNNING'
  | 'STOPPED'
  | 'STOPPING';

/**
 * A renter's invoice: a `draft` is a preview and never stored;
 * `finalized` may become `paid` or `void`, and nothing else changes.
 */
export type InvoiceStatus =
  | 'DRAFT'
  | 'FINALIZED'
  | 'PAID'
  | 'VOID';

/** Hours of one of the caller's reservations to sell. */
export type ListReservationHoursInput = {
  /** A whole UTC hour after `startsAt`, within the block. */
  endsAt: string;
  /** The asking price per GPU-hour, 0 to 1000 with at most 9 decimal places. */
  pricePerGpuHour: string;
  reservationId: string | number;
  /** A whole UTC hour of the block, in the future. */
  startsAt: string;
};

export type ListingState =
  /** Its hours started before anyone bought them, or the reservation ended. */
  | 'EXPIRED'
  | 'OPEN'
  /** A purchase is under way (its saga holds the listing). */
  | 'SELLING'
  | 'SOLD'
  | 'WITHDRAWN';

/**
 * What usage is measured in (see [`crate::meters`] for units and
 * prices).
 *
 * Declared in the order of their names, so that lines sorted by meter
 * come in the same order from Rust and from SQL.
 */
export type Meter =
  | 'BANDWIDTH_DOWN'
  | 'BANDWIDTH_UP'
  | 'GPU'
  | 'STORAGE';

/** A slot of a fixed MIG layout as a host gives it. */
export type MigLayoutSlotInput = {
  /** A name from the model's `migProfiles`. */
  profile: string;
  /** One of the profile's `placements` (0 to 7). */
  start: number;
};

/** A host's payout: `pending` until Stripe's transfer answered. */
export type PayoutStatus =
  | 'FAILED'
  | 'PAID'
  | 'PENDING';

export type RegisterMachineInput = {
  /** ISO 3166-1 alpha-2. */
  country: string;
  cpuCores: number;
  cpuModel?: string | null | undefined;
  /** e.g. "12.4". */
  cudaVersion?: string | null | undefined;
  datacenter?: boolean | null | undefined;
  diskGib: number;
  diskType?: DiskType | null | undefined;
  downloadMbps?: number | null | undefined;
  driverVersion?: string | null | undefined;
  gpuCount: number;
  /** A name from `gpuModels`. */
  gpuModel: string;
  idempotencyKey: string;
  name: string;
  ramGib: number;
  region?: string | null | undefined;
  uploadMbps?: number | null | undefined;
  /** Per GPU; the catalog's figure for the model when left out. */
  vramGib?: number | null | undefined;
};

/**
 * How GPUs are rented: at the on-demand price until the renter stops,
 * or interruptible at a bid, preempted by any order of higher priority.
 */
export type RentalType =
  | 'INTERRUPTIBLE'
  | 'ON_DEMAND';

export type ReservationState =
  /** The block is running. */
  | 'ACTIVE'
  /** Paid; the block has not started. */
  | 'BOOKED'
  /** Cancelled by the host, or its machine left the market. */
  | 'CANCELLED'
  /** The block is over. */
  | 'ENDED'
  /** Refused (no capacity, no funds, over quota); nothing is held. */
  | 'FAILED'
  /** Being booked (the saga has not finished). */
  | 'PENDING';

/** A host's terms for reserved blocks on a machine. */
export type ReservedTermsInput = {
  /** How far ahead the machine can be booked: 1 to 365 days. */
  maxLeadDays: number;
  /** The shortest block, 1 to 2160 hours (90 days). */
  minBlockHours: number;
  /** Per GPU-hour, 0 to 1000 with at most 9 decimal places. */
  pricePerGpuHour: string;
};

export type Scope =
  | 'ADMIN'
  | 'BILLING'
  | 'HOST'
  | 'READ'
  | 'RENT';

export type SetGpuModeInput = {
  /** The GPU's index on the machine, 0 to 63. */
  gpuIndex: number;
  /**
   * MIG_FIXED only, and required there: where slices may go (at most 64
   * slots, no two sharing a memory slice).
   */
  layout?: Array<MigLayoutSlotInput> | null | undefined;
  machineId: string | number;
  mode: GpuMode;
};

export type SignUpInput = {
  email: string;
  /** At least 8 characters. */
  password: string;
  /** RENTER, HOST or both. */
  roles: Array<TenantRole>;
  tenantName: string;
};

/** A host's statement: a `draft` is a preview and never stored. */
export type StatementStatus =
  | 'DRAFT'
  | 'FINALIZED';

export type TenantRole =
  | 'HOST'
  /** The marketplace's own tenant; cannot be chosen at sign-up. */
  | 'PLATFORM'
  | 'RENTER';

export type UpdateWebhookEndpointInput = {
  description?: string | null | undefined;
  /** True re-enables a disabled endpoint. */
  enabled?: boolean | null | undefined;
  eventTypes?: Array<string> | null | undefined;
  url?: string | null | undefined;
};

export type Verification =
  | 'SUSPENDED'
  | 'UNVERIFIED'
  | 'VERIFIED';

export type WebhookDeliveryStatus =
  | 'DELIVERED'
  /** The retry schedule ran out (or the endpoint was disabled). */
  | 'FAILED'
  /** Not delivered yet; `nextAttemptAt` says when it is tried. */
  | 'PENDING';

export type BillingLogInMutationVariables = Exact<{
  email: string;
  password: string;
}>;


export type BillingLogInMutation = { login: { token: string, me: { email: string, tenantRoles: Array<TenantRole> } } };

export type BillingRunwayQueryVariables = Exact<{ [key: string]: never; }>;


export type BillingRunwayQuery = { runway: { balance: string, currency: string, burnRatePerHour: string, runningInstances: number, runwaySeconds: number | null, low: boolean, warnBelowSeconds: number } };

export type BillingSpendSeriesQueryVariables = Exact<{
  from: string;
  to: string;
}>;


export type BillingSpendSeriesQuery = { usageSeries: { fromUtc: string, toUtc: string, currency: string, totalSpend: string, totalSeconds: number, points: Array<{ bucketStartUtc: string, key: string | null, seconds: number, spend: string }> } };

export type BillingInstancesQueryVariables = Exact<{ [key: string]: never; }>;


export type BillingInstancesQuery = { instances: Array<{ id: string, gpuModel: string, gpuCount: number, rental: RentalType, pricePerGpuHour: string, pricePerHourTotal: string, storagePricePerGbMonth: string, currency: string, state: InstanceState, statusReason: string | null, runningAtUtc: string | null, stoppedAtUtc: string | null, createdAtUtc: string, costSoFar: string, billedSeconds: number }>, usage: Array<{ id: string, instanceId: string, meterKind: Meter | null, startedAtUtc: string | null, endedAtUtc: string | null, billedSeconds: number | null, pricePerHour: string, currency: string }> };

export type BillingInvoicesQueryVariables = Exact<{ [key: string]: never; }>;


export type BillingInvoicesQuery = { invoices: Array<{ id: string, number: number, state: InvoiceStatus, periodStartUtc: string, periodEndUtc: string, currency: string, subtotal: string, total: string, exactTotal: string, rounding: string, finalizedAtUtc: string | null, paidAtUtc: string | null, lines: Array<{ instanceId: string, meterKind: Meter | null, quantity: number, unit: string, unitPrice: string, pricingUnit: string, pricingQuantity: string, earlierPeriod: boolean, amount: string, exactAmount: string }> }> };

export type BillingUsageCsvQueryVariables = Exact<{
  invoiceId: string | number;
}>;


export type BillingUsageCsvQuery = { invoiceUsageCsv: string };

export type BillingBalanceHistoryQueryVariables = Exact<{
  first?: number | null | undefined;
  after?: string | null | undefined;
}>;


export type BillingBalanceHistoryQuery = { balanceHistory: { balance: string, currency: string, nodes: Array<{ kind: string, description: string, instanceId: string | null, amount: string, balanceAfter: string, postedAtUtc: string, cursor: string }>, pageInfo: { endCursor: string | null, hasNextPage: boolean } } };

export type OperatorViewerQueryVariables = Exact<{ [key: string]: never; }>;


export type OperatorViewerQuery = { me: { operator: boolean, tenantRoles: Array<TenantRole> } };

export type OperatorMarketplaceQueryVariables = Exact<{
  from: string;
  to: string;
  nearQuotaPercent?: number | null | undefined;
}>;


export type OperatorMarketplaceQuery = { marketplaceOverview: { from: string, to: string, volume: { currency: string, totalVolume: string, totalHostEarnings: string, totalFees: string, totalFeeAdjustments: string, totalFeeRevenue: string, totalPostings: number, totalSeconds: number, points: Array<{ bucketStartUtc: string, volume: string, hostEarnings: string, fees: string, feeAdjustments: string, postings: number }> }, gpuSupply: { atUtc: string, listedGpus: number, onlineGpus: number, rentedGpus: number, rentedListedGpus: number, models: Array<{ gpuModel: string, listedMachines: number, listedGpus: number, onlineGpus: number, rentedGpus: number, rentedListedGpus: number }> }, nearQuota: { thresholdPercent: number, currency: string, tenants: Array<{ tenantId: string, tenantName: string, dimensions: Array<{ quota: string, limit: string, used: string, percent: string }> }> }, outOfCredit: { currency: string, warnBelowSeconds: number, tenants: Array<{ tenantId: string, tenantName: string, reasons: Array<CreditRiskReason>, balance: string, burnPerHour: string | null, runwaySeconds: number | null, lowSinceUtc: string | null, lastChargedAtUtc: string | null }> } } };

export type RenterReservationFieldsFragment = { id: string, machineId: string, gpuModel: string, gpuCount: number, gpuIndices: Array<number>, startsAt: string, endsAt: string, hours: number, hoursLeft: number, pricePerGpuHour: string, amount: string, currency: string, state: ReservationState, parentId: string | null, reason: string | null, sold: Array<{ startsAt: string, endsAt: string }>, escrow: { amount: string, released: string, fees: string, refunded: string, penalty: string, remaining: string, state: EscrowState } | null };

export type ResaleListingFieldsFragment = { id: string, reservationId: string, machineId: string, gpuModel: string, gpuCount: number, startsAt: string, endsAt: string, hours: number, pricePerGpuHour: string, amount: string, currency: string, state: ListingState, createdAt: string };

export type BillingReservationsQueryVariables = Exact<{
  from: string;
}>;


export type BillingReservationsQuery = { reservations: Array<{ id: string, machineId: string, gpuModel: string, gpuCount: number, gpuIndices: Array<number>, startsAt: string, endsAt: string, hours: number, hoursLeft: number, pricePerGpuHour: string, amount: string, currency: string, state: ReservationState, parentId: string | null, reason: string | null, sold: Array<{ startsAt: string, endsAt: string }>, escrow: { amount: string, released: string, fees: string, refunded: string, penalty: string, remaining: string, state: EscrowState } | null }>, myListings: Array<{ id: string, reservationId: string, machineId: string, gpuModel: string, gpuCount: number, startsAt: string, endsAt: string, hours: number, pricePerGpuHour: string, amount: string, currency: string, state: ListingState, createdAt: string }>, resaleListings: Array<{ id: string, reservationId: string, machineId: string, gpuModel: string, gpuCount: number, startsAt: string, endsAt: string, hours: number, pricePerGpuHour: string, amount: string, currency: string, state: ListingState, createdAt: string }>, reservationTerms: { resaleFeeRate: string, cancellationPenaltyRate: string } };

export type ListReservationHoursMutationVariables = Exact<{
  input: ListReservationHoursInput;
}>;


export type ListReservationHoursMutation = { listReservationHours: { id: string, reservationId: string, machineId: string, gpuModel: string, gpuCount: number, startsAt: string, endsAt: string, hours: number, pricePerGpuHour: string, amount: string, currency: string, state: ListingState, createdAt: string } };

export type WithdrawListingMutationVariables = Exact<{
  id: string | number;
}>;


export type WithdrawListingMutation = { withdrawListing: { id: string, reservationId: string, machineId: string, gpuModel: string, gpuCount: number, startsAt: string, endsAt: string, hours: number, pricePerGpuHour: string, amount: string, currency: string, state: ListingState, createdAt: string } };

export type BuyReservationHoursMutationVariables = Exact<{
  input: BuyReservationHoursInput;
}>;


export type BuyReservationHoursMutation = { buyReservationHours: { id: string, machineId: string, gpuModel: string, gpuCount: number, gpuIndices: Array<number>, startsAt: string, endsAt: string, hours: number, hoursLeft: number, pricePerGpuHour: string, amount: string, currency: string, state: ReservationState, parentId: string | null, reason: string | null, sold: Array<{ startsAt: string, endsAt: string }>, escrow: { amount: string, released: string, fees: string, refunded: string, penalty: string, remaining: string, state: EscrowState } | null } };

export type TopUpPlatformQueryVariables = Exact<{ [key: string]: never; }>;


export type TopUpPlatformQuery = { platform: { currency: string, stripePublishableKey: string | null }, me: { tenantRoles: Array<TenantRole> } };

export type TopUpStateQueryVariables = Exact<{ [key: string]: never; }>;


export type TopUpStateQuery = { balance: { amount: string, currency: string }, topUps: Array<{ id: string, amount: string, currency: string, status: string, createdAtUtc: string, succeededAtUtc: string | null }> };

export type TopUpCreateMutationVariables = Exact<{
  amount: string;
  idempotencyKey?: string | null | undefined;
}>;


export type TopUpCreateMutation = { createTopUp: { id: string, amount: string, currency: string, status: string, clientSecret: string | null, paymentIntentId: string | null, createdAtUtc: string } };

export type SignUpMutationVariables = Exact<{
  input: SignUpInput;
}>;


export type SignUpMutation = { signUp: { token: string, expiresAtUtc: string, me: { email: string, tenantRoles: Array<TenantRole> } } };

export type LogInMutationVariables = Exact<{
  email: string;
  password: string;
}>;


export type LogInMutation = { login: { token: string, expiresAtUtc: string, me: { email: string, tenantRoles: Array<TenantRole> } } };

export type MeFieldsFragment = { email: string, tenantRoles: Array<TenantRole> };

export type GpuCatalogQueryVariables = Exact<{ [key: string]: never; }>;


export type GpuCatalogQuery = { gpuModels: Array<{ name: string, vramGib: number, architecture: string }> };

export type MachineFieldsFragment = { id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAtUtc: string | null, gpusAllocated: number, reliability: string | null, verified: boolean, createdAtUtc: string };

export type MyMachinesQueryVariables = Exact<{ [key: string]: never; }>;


export type MyMachinesQuery = { myMachines: Array<{ id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAtUtc: string | null, gpusAllocated: number, reliability: string | null, verified: boolean, createdAtUtc: string }> };

export type RegisterMachineMutationVariables = Exact<{
  input: RegisterMachineInput;
}>;


export type RegisterMachineMutation = { registerMachine: { agentToken: string | null, machine: { id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAtUtc: string | null, gpusAllocated: number, reliability: string | null, verified: boolean, createdAtUtc: string } } };

export type SetPriceMutationVariables = Exact<{
  machineId: string | number;
  price: string;
}>;


export type SetPriceMutation = { setMachinePricing: { id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAtUtc: string | null, gpusAllocated: number, reliability: string | null, verified: boolean, createdAtUtc: string } };

export type ListMachineMutationVariables = Exact<{
  machineId: string | number;
}>;


export type ListMachineMutation = { listMachine: { id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAtUtc: string | null, gpusAllocated: number, reliability: string | null, verified: boolean, createdAtUtc: string } };

export type UnlistMachineMutationVariables = Exact<{
  machineId: string | number;
}>;


export type UnlistMachineMutation = { unlistMachine: { id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAtUtc: string | null, gpusAllocated: number, reliability: string | null, verified: boolean, createdAtUtc: string } };

export type HeartbeatGapsQueryVariables = Exact<{
  machineId: string | number;
}>;


export type HeartbeatGapsQuery = { heartbeatGaps: Array<{ startedAtUtc: string, endedAtUtc: string | null, seconds: number }> };

export type MachineGpuFieldsFragment = { index: number, mode: GpuMode, rentedWhole: boolean, layout: Array<{ profile: string, start: number }>, slices: Array<{ profile: string, start: number, size: number, instanceId: string | null }> };

export type HostMachineGpusQueryVariables = Exact<{ [key: string]: never; }>;


export type HostMachineGpusQuery = { myMachines: Array<{ id: string, gpus: Array<{ index: number, mode: GpuMode, rentedWhole: boolean, layout: Array<{ profile: string, start: number }>, slices: Array<{ profile: string, start: number, size: number, instanceId: string | null }> }> }>, gpuModels: Array<{ name: string, migProfiles: Array<{ name: string, memorySlices: number, memoryGib: number }> }> };

export type SetGpuModeMutationVariables = Exact<{
  input: SetGpuModeInput;
}>;


export type SetGpuModeMutation = { setGpuMode: Array<{ index: number, mode: GpuMode, rentedWhole: boolean, layout: Array<{ profile: string, start: number }>, slices: Array<{ profile: string, start: number, size: number, instanceId: string | null }> }> };

export type HostProfileFieldsFragment = { legalName: string | null, country: string | null, payoutCurrency: string | null, verification: Verification, verificationReason: string | null, updatedAtUtc: string };

export type MyHostProfileQueryVariables = Exact<{ [key: string]: never; }>;


export type MyHostProfileQuery = { hostProfile: { legalName: string | null, country: string | null, payoutCurrency: string | null, verification: Verification, verificationReason: string | null, updatedAtUtc: string } };

export type UpdateHostProfileMutationVariables = Exact<{
  input: HostProfileInput;
}>;


export type UpdateHostProfileMutation = { updateHostProfile: { legalName: string | null, country: string | null, payoutCurrency: string | null, verification: Verification, verificationReason: string | null, updatedAtUtc: string } };

export type PayoutAccountFieldsFragment = { stripeAccountId: string, country: string, email: string | null, transfersStatus: string, payoutsEnabled: boolean, detailsSubmitted: boolean, createdAtUtc: string };

export type MyPayoutAccountQueryVariables = Exact<{ [key: string]: never; }>;


export type MyPayoutAccountQuery = { payoutAccount: { stripeAccountId: string, country: string, email: string | null, transfersStatus: string, payoutsEnabled: boolean, detailsSubmitted: boolean, createdAtUtc: string } | null };

export type CreatePayoutOnboardingLinkMutationVariables = Exact<{ [key: string]: never; }>;


export type CreatePayoutOnboardingLinkMutation = { createPayoutOnboardingLink: { url: string, expiresAtUtc: string } };

export type CreatePayoutAccountMutationVariables = Exact<{
  country: string;
  email?: string | null | undefined;
}>;


export type CreatePayoutAccountMutation = { createPayoutAccount: { stripeAccountId: string, country: string, email: string | null, transfersStatus: string, payoutsEnabled: boolean, detailsSubmitted: boolean, createdAtUtc: string } };

export type PlatformFeeRateQueryVariables = Exact<{ [key: string]: never; }>;


export type PlatformFeeRateQuery = { platform: { platformFeeRate: string } };

export type HostEarningsOverviewQueryVariables = Exact<{
  from: string;
  to: string;
}>;


export type HostEarningsOverviewQuery = { hostEarnings: { total: string, currency: string }, earningsByMachine: { fromUtc: string, toUtc: string, currency: string, totalGross: string, totalFee: string, totalNet: string, total: string, days: Array<{ dayUtc: string, machineId: string | null, gpuModel: string | null, seconds: number, gross: string, fee: string, net: string, downtimeCredits: string, total: string }> } };

export type HostStatementsAndPayoutsQueryVariables = Exact<{ [key: string]: never; }>;


export type HostStatementsAndPayoutsQuery = { statements: Array<{ id: string | null, number: number | null, state: StatementStatus, periodStartUtc: string, periodEndUtc: string, currency: string, earnings: string, payouts: string }>, payouts: Array<{ id: string, amount: string, currency: string, state: PayoutStatus, failureReason: string | null, createdAtUtc: string, paidAtUtc: string | null }> };

export type StatementFieldsFragment = { id: string | null, number: number | null, state: StatementStatus, periodStartUtc: string, periodEndUtc: string, currency: string, seconds: number, gross: string, fee: string, net: string, downtimeCredits: string, earnings: string, adjustments: string, payouts: string, openingBalance: string, closingBalance: string, finalizedAtUtc: string | null, lines: Array<{ machineId: string | null, gpuModel: string | null, meterKind: Meter | null, earlierPeriod: boolean, seconds: number, gross: string, fee: string, net: string, downtimeCredits: string, amount: string, postings: number }> };

export type HostStatementQueryVariables = Exact<{
  id: string | number;
}>;


export type HostStatementQuery = { statement: { id: string | null, number: number | null, state: StatementStatus, periodStartUtc: string, periodEndUtc: string, currency: string, seconds: number, gross: string, fee: string, net: string, downtimeCredits: string, earnings: string, adjustments: string, payouts: string, openingBalance: string, closingBalance: string, finalizedAtUtc: string | null, lines: Array<{ machineId: string | null, gpuModel: string | null, meterKind: Meter | null, earlierPeriod: boolean, seconds: number, gross: string, fee: string, net: string, downtimeCredits: string, amount: string, postings: number }> } };

export type HostStatementPreviewQueryVariables = Exact<{ [key: string]: never; }>;


export type HostStatementPreviewQuery = { statementPreview: { id: string | null, number: number | null, state: StatementStatus, periodStartUtc: string, periodEndUtc: string, currency: string, seconds: number, gross: string, fee: string, net: string, downtimeCredits: string, earnings: string, adjustments: string, payouts: string, openingBalance: string, closingBalance: string, finalizedAtUtc: string | null, lines: Array<{ machineId: string | null, gpuModel: string | null, meterKind: Meter | null, earlierPeriod: boolean, seconds: number, gross: string, fee: string, net: string, downtimeCredits: string, amount: string, postings: number }> } };

export type ApiKeyFieldsFragment = { id: string, name: string, prefix: string, scopes: Array<Scope>, ownerEmail: string, createdAtUtc: string, lastUsedAtUtc: string | null, revokedAtUtc: string | null };

export type ApiKeysPageQueryVariables = Exact<{
  includeRevoked: boolean;
}>;


export type ApiKeysPageQuery = { apiKeys: Array<{ id: string, name: string, prefix: string, scopes: Array<Scope>, ownerEmail: string, createdAtUtc: string, lastUsedAtUtc: string | null, revokedAtUtc: string | null }>, me: { email: string, scopes: Array<Scope> } };

export type CreateApiKeyMutationVariables = Exact<{
  input: CreateApiKeyInput;
}>;


export type CreateApiKeyMutation = { createApiKey: { secret: string | null, apiKey: { id: string, name: string, prefix: string, scopes: Array<Scope>, ownerEmail: string, createdAtUtc: string, lastUsedAtUtc: string | null, revokedAtUtc: string | null } } };

export type RevokeApiKeyMutationVariables = Exact<{
  id: string | number;
}>;


export type RevokeApiKeyMutation = { revokeApiKey: { id: string, name: string, prefix: string, scopes: Array<Scope>, ownerEmail: string, createdAtUtc: string, lastUsedAtUtc: string | null, revokedAtUtc: string | null } };

export type HostReservationFieldsFragment = { id: string, gpuCount: number, gpuIndices: Array<number>, startsAt: string, endsAt: string, hours: number, hoursLeft: number, pricePerGpuHour: string, amount: string, currency: string, state: ReservationState, parentId: string | null, reason: string | null, escrow: { released: string, fees: string, refunded: string, remaining: string, state: EscrowState } | null };

export type HostMachineReservationsQueryVariables = Exact<{
  machineId: string | number;
  from: string;
  to: string;
}>;


export type HostMachineReservationsQuery = { machineCalendar: { gpuCount: number, from: string, to: string, hours: Array<{ startsAt: string, freeGpus: number }>, bookings: Array<{ reservationId: string, gpuIndex: number, startsAt: string, endsAt: string }>, terms: { pricePerGpuHour: string, maxLeadDays: number, minBlockHours: number, currency: string } | null }, machineReservations: Array<{ id: string, gpuCount: number, gpuIndices: Array<number>, startsAt: string, endsAt: string, hours: number, hoursLeft: number, pricePerGpuHour: string, amount: string, currency: string, state: ReservationState, parentId: string | null, reason: string | null, escrow: { released: string, fees: string, refunded: string, remaining: string, state: EscrowState } | null }>, myMachines: Array<{ id: string, reservedEarningsToCome: { amount: string, currency: string, blocks: number } }>, reservationTerms: { feeRate: string, cancellationPenaltyRate: string } };

export type SetReservedTermsMutationVariables = Exact<{
  machineId: string | number;
  terms?: ReservedTermsInput | null | undefined;
}>;


export type SetReservedTermsMutation = { setReservedTerms: { pricePerGpuHour: string, maxLeadDays: number, minBlockHours: number, currency: string } | null };

export type CancelReservationMutationVariables = Exact<{
  id: string | number;
  reason: string;
}>;


export type CancelReservationMutation = { cancelReservation: { id: string, gpuCount: number, gpuIndices: Array<number>, startsAt: string, endsAt: string, hours: number, hoursLeft: number, pricePerGpuHour: string, amount: string, currency: string, state: ReservationState, parentId: string | null, reason: string | null, escrow: { released: string, fees: string, refunded: string, remaining: string, state: EscrowState } | null } };

export type WebhookEndpointFieldsFragment = { id: string, url: string, description: string, eventTypes: Array<string>, enabled: boolean, disabledReason: string | null, disabledAt: string | null, previousSecretUntil: string | null, createdAt: string, updatedAt: string };

export type WebhookDeliveryFieldsFragment = { id: string, webhookId: string, endpointId: string, eventType: string, status: WebhookDeliveryStatus, attempts: number, nextAttemptAt: string | null, deliveredAt: string | null, createdAt: string, payload: string, attemptLog: Array<{ startedAt: string, statusCode: number | null, succeeded: boolean, latencyMs: number, responseHead: string, error: string | null }> };

export type WebhooksPageQueryVariables = Exact<{ [key: string]: never; }>;


export type WebhooksPageQuery = { webhookEventTypes: Array<{ name: string, description: string }>, webhookEndpoints: Array<{ id: string, url: string, description: string, eventTypes: Array<string>, enabled: boolean, disabledReason: string | null, disabledAt: string | null, previousSecretUntil: string | null, createdAt: string, updatedAt: string }> };

export type WebhookDeliveriesQueryVariables = Exact<{
  endpointId?: string | number | null | undefined;
  limit?: number | null | undefined;
}>;


export type WebhookDeliveriesQuery = { webhookDeliveries: Array<{ id: string, webhookId: string, endpointId: string, eventType: string, status: WebhookDeliveryStatus, attempts: number, nextAttemptAt: string | null, deliveredAt: string | null, createdAt: string, payload: string, attemptLog: Array<{ startedAt: string, statusCode: number | null, succeeded: boolean, latencyMs: number, responseHead: string, error: string | null }> }> };

export type CreateWebhookEndpointMutationVariables = Exact<{
  input: CreateWebhookEndpointInput;
}>;


export type CreateWebhookEndpointMutation = { createWebhookEndpoint: { secret: string, endpoint: { id: string, url: string, description: string, eventTypes: Array<string>, enabled: boolean, disabledReason: string | null, disabledAt: string | null, previousSecretUntil: string | null, createdAt: string, updatedAt: string } } };

export type UpdateWebhookEndpointMutationVariables = Exact<{
  id: string | number;
  input: UpdateWebhookEndpointInput;
}>;


export type UpdateWebhookEndpointMutation = { updateWebhookEndpoint: { id: string, url: string, description: string, eventTypes: Array<string>, enabled: boolean, disabledReason: string | null, disabledAt: string | null, previousSecretUntil: string | null, createdAt: string, updatedAt: string } };

export type DeleteWebhookEndpointMutationVariables = Exact<{
  id: string | number;
}>;


export type DeleteWebhookEndpointMutation = { deleteWebhookEndpoint: boolean };

export type RotateWebhookSecretMutationVariables = Exact<{
  id: string | number;
}>;


export type RotateWebhookSecretMutation = { rotateWebhookSecret: { secret: string, endpoint: { id: string, url: string, description: string, eventTypes: Array<string>, enabled: boolean, disabledReason: string | null, disabledAt: string | null, previousSecretUntil: string | null, createdAt: string, updatedAt: string } } };

export type SendWebhookTestMutationVariables = Exact<{
  endpointId: string | number;
}>;


export type SendWebhookTestMutation = { sendWebhookTest: { id: string, webhookId: string, endpointId: string, eventType: string, status: WebhookDeliveryStatus, attempts: number, nextAttemptAt: string | null, deliveredAt: string | null, createdAt: string, payload: string, attemptLog: Array<{ startedAt: string, statusCode: number | null, succeeded: boolean, latencyMs: number, responseHead: string, error: string | null }> } };

export type RedeliverWebhookMutationVariables = Exact<{
  deliveryId: string | number;
}>;


export type RedeliverWebhookMutation = { redeliverWebhook: { id: string, webhookId: string, endpointId: string, eventType: string, status: WebhookDeliveryStatus, attempts: number, nextAttemptAt: string | null, deliveredAt: string | null, createdAt: string, payload: string, attemptLog: Array<{ startedAt: string, statusCode: number | null, succeeded: boolean, latencyMs: number, responseHead: string, error: string | null }> } };

export class TypedDocumentString<TResult, TVariables>
  extends String
  implements DocumentTypeDecoration<TResult, TVariables>
{
  __apiType?: NonNullable<DocumentTypeDecoration<TResult, TVariables>['__apiType']>;
  private value: string;
  public __meta__?: Record<string, any> | undefined;

  constructor(value: string, __meta__?: Record<string, any> | undefined) {
    super(value);
    this.value = value;
    this.__meta__ = __meta__;
  }

  override toString(): string & DocumentTypeDecoration<TResult, TVariables> {
    return this.value;
  }
}
export const RenterReservationFieldsFragmentDoc = new TypedDocumentString(`
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
    `, {"fragmentName":"RenterReservationFields"}) as unknown as TypedDocumentString<RenterReservationFieldsFragment, unknown>;
export const ResaleListingFieldsFragmentDoc = new TypedDocumentString(`
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
    `, {"fragmentName":"ResaleListingFields"}) as unknown as TypedDocumentString<ResaleListingFieldsFragment, unknown>;
export const MeFieldsFragmentDoc = new TypedDocumentString(`
    fragment MeFields on Me {
  email
  tenantRoles
}
    `, {"fragmentName":"MeFields"}) as unknown as TypedDocumentString<MeFieldsFragment, unknown>;
export const MachineFieldsFragmentDoc = new TypedDocumentString(`
    fragment MachineFields on Machine {
  id
  name
  gpuModel
  gpuCount
  vramGib
  country
  pricePerGpuHour
  currency
  listed
  online
  lastHeartbeatAtUtc
  gpusAllocated
  reliability
  verified
  createdAtUtc
}
    `, {"fragmentName":"MachineFields"}) as unknown as TypedDocumentString<MachineFieldsFragment, unknown>;
export const MachineGpuFieldsFragmentDoc = new TypedDocumentString(`
    fragment MachineGpuFields on MachineGpu {
  index
  mode
  rentedWhole
  layout {
    profile
    start
  }
  slices {
    profile
    start
    size
    instanceId
  }
}
    `, {"fragmentName":"MachineGpuFields"}) as unknown as TypedDocumentString<MachineGpuFieldsFragment, unknown>;
export const HostProfileFieldsFragmentDoc = new TypedDocumentString(`
    fragment HostProfileFields on HostProfile {
  legalName
  country
  payoutCurrency
  verification
  verificationReason
  updatedAtUtc
}
    `, {"fragmentName":"HostProfileFields"}) as unknown as TypedDocumentString<HostProfileFieldsFragment, unknown>;
export const PayoutAccountFieldsFragmentDoc = new TypedDocumentString(`
    fragment PayoutAccountFields on PayoutAccount {
  stripeAccountId
  country
  email
  transfersStatus
  payoutsEnabled
  detailsSubmitted
  createdAtUtc
}
    `, {"fragmentName":"PayoutAccountFields"}) as unknown as TypedDocumentString<PayoutAccountFieldsFragment, unknown>;
export const StatementFieldsFragmentDoc = new TypedDocumentString(`
    fragment StatementFields on Statement {
  id
  number
  state
  periodStartUtc
  periodEndUtc
  currency
  seconds
  gross
  fee
  net
  downtimeCredits
  earnings
  adjustments
  payouts
  openingBalance
  closingBalance
  finalizedAtUtc
  lines {
    machineId
    gpuModel
    meterKind
    earlierPeriod
    seconds
    gross
    fee
    net
    downtimeCredits
    amount
    postings
  }
}
    `, {"fragmentName":"StatementFields"}) as unknown as TypedDocumentString<StatementFieldsFragment, unknown>;
export const ApiKeyFieldsFragmentDoc = new TypedDocumentString(`
    fragment ApiKeyFields on ApiKey {
  id
  name
  prefix
  scopes
  ownerEmail
  createdAtUtc
  lastUsedAtUtc
  revokedAtUtc
}
    `, {"fragmentName":"ApiKeyFields"}) as unknown as TypedDocumentString<ApiKeyFieldsFragment, unknown>;
export const HostReservationFieldsFragmentDoc = new TypedDocumentString(`
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
    `, {"fragmentName":"HostReservationFields"}) as unknown as TypedDocumentString<HostReservationFieldsFragment, unknown>;
export const WebhookEndpointFieldsFragmentDoc = new TypedDocumentString(`
    fragment WebhookEndpointFields on WebhookEndpoint {
  id
  url
  description
  eventTypes
  enabled
  disabledReason
  disabledAt
  previousSecretUntil
  createdAt
  updatedAt
}
    `, {"fragmentName":"WebhookEndpointFields"}) as unknown as TypedDocumentString<WebhookEndpointFieldsFragment, unknown>;
export const WebhookDeliveryFieldsFragmentDoc = new TypedDocumentString(`
    fragment WebhookDeliveryFields on WebhookDelivery {
  id
  webhookId
  endpointId
  eventType
  status
  attempts
  nextAttemptAt
  deliveredAt
  createdAt
  payload
  attemptLog {
    startedAt
    statusCode
    succeeded
    latencyMs
    responseHead
    error
  }
}
    `, {"fragmentName":"WebhookDeliveryFields"}) as unknown as TypedDocumentString<WebhookDeliveryFieldsFragment, unknown>;
export const BillingLogInDocument = new TypedDocumentString(`
    mutation BillingLogIn($email: String!, $password: String!) {
  login(email: $email, password: $password) {
    token
    me {
      email
      tenantRoles
    }
  }
}
    `) as unknown as TypedDocumentString<BillingLogInMutation, BillingLogInMutationVariables>;
export const BillingRunwayDocument = new TypedDocumentString(`
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
    `) as unknown as TypedDocumentString<BillingRunwayQuery, BillingRunwayQueryVariables>;
export const BillingSpendSeriesDocument = new TypedDocumentString(`
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
    `) as unknown as TypedDocumentString<BillingSpendSeriesQuery, BillingSpendSeriesQueryVariables>;
export const BillingInstancesDocument = new TypedDocumentString(`
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
    `) as unknown as TypedDocumentString<BillingInstancesQuery, BillingInstancesQueryVariables>;
export const BillingInvoicesDocument = new TypedDocumentString(`
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
    `) as unknown as TypedDocumentString<BillingInvoicesQuery, BillingInvoicesQueryVariables>;
export const BillingUsageCsvDocument = new TypedDocumentString(`
    query BillingUsageCsv($invoiceId: ID!) {
  invoiceUsageCsv(invoiceId: $invoiceId)
}
    `) as unknown as TypedDocumentString<BillingUsageCsvQuery, BillingUsageCsvQueryVariables>;
export const BillingBalanceHistoryDocument = new TypedDocumentString(`
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
    `) as unknown as TypedDocumentString<BillingBalanceHistoryQuery, BillingBalanceHistoryQueryVariables>;
export const OperatorViewerDocument = new TypedDocumentString(`
    query OperatorViewer {
  me {
    operator
    tenantRoles
  }
}
    `) as unknown as TypedDocumentString<OperatorViewerQuery, OperatorViewerQueryVariables>;
export const OperatorMarketplaceDocument = new TypedDocumentString(`
    query OperatorMarketplace($from: DateTime!, $to: DateTime!, $nearQuotaPercent: Int) {
  marketplaceOverview(
    fromUtc: $from
    toUtc: $to
    bucket: DAY
    nearQuotaPercent: $nearQuotaPercent
  ) {
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
    `) as unknown as TypedDocumentString<OperatorMarketplaceQuery, OperatorMarketplaceQueryVariables>;
export const BillingReservationsDocument = new TypedDocumentString(`
    query BillingReservations($from: DateTime!) {
  reservations {
    ...RenterReservationFields
  }
  myListings {
    ...ResaleListingFields
  }
  resaleListings(filter: {from: $from}) {
    ...ResaleListingFields
  }
  reservationTerms {
    resaleFeeRate
    cancellationPenaltyRate
  }
}
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
}`) as unknown as TypedDocumentString<BillingReservationsQuery, BillingReservationsQueryVariables>;
export const ListReservationHoursDocument = new TypedDocumentString(`
    mutation ListReservationHours($input: ListReservationHoursInput!) {
  listReservationHours(input: $input) {
    ...ResaleListingFields
  }
}
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
}`) as unknown as TypedDocumentString<ListReservationHoursMutation, ListReservationHoursMutationVariables>;
export const WithdrawListingDocument = new TypedDocumentString(`
    mutation WithdrawListing($id: ID!) {
  withdrawListing(id: $id) {
    ...ResaleListingFields
  }
}
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
}`) as unknown as TypedDocumentString<WithdrawListingMutation, WithdrawListingMutationVariables>;
export const BuyReservationHoursDocument = new TypedDocumentString(`
    mutation BuyReservationHours($input: BuyReservationHoursInput!) {
  buyReservationHours(input: $input) {
    ...RenterReservationFields
  }
}
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
}`) as unknown as TypedDocumentString<BuyReservationHoursMutation, BuyReservationHoursMutationVariables>;
export const TopUpPlatformDocument = new TypedDocumentString(`
    query TopUpPlatform {
  platform {
    currency
    stripePublishableKey
  }
  me {
    tenantRoles
  }
}
    `) as unknown as TypedDocumentString<TopUpPlatformQuery, TopUpPlatformQueryVariables>;
export const TopUpStateDocument = new TypedDocumentString(`
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
    `) as unknown as TypedDocumentString<TopUpStateQuery, TopUpStateQueryVariables>;
export const TopUpCreateDocument = new TypedDocumentString(`
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
    `) as unknown as TypedDocumentString<TopUpCreateMutation, TopUpCreateMutationVariables>;
export const SignUpDocument = new TypedDocumentString(`
    mutation SignUp($input: SignUpInput!) {
  signUp(input: $input) {
    token
    expiresAtUtc
    me {
      ...MeFields
    }
  }
}
    fragment MeFields on Me {
  email
  tenantRoles
}`) as unknown as TypedDocumentString<SignUpMutation, SignUpMutationVariables>;
export const LogInDocument = new TypedDocumentString(`
    mutation LogIn($email: String!, $password: String!) {
  login(email: $email, password: $password) {
    token
    expiresAtUtc
    me {
      ...MeFields
    }
  }
}
    fragment MeFields on Me {
  email
  tenantRoles
}`) as unknown as TypedDocumentString<LogInMutation, LogInMutationVariables>;
export const GpuCatalogDocument = new TypedDocumentString(`
    query GpuCatalog {
  gpuModels {
    name
    vramGib
    architecture
  }
}
    `) as unknown as TypedDocumentString<GpuCatalogQuery, GpuCatalogQueryVariables>;
export const MyMachinesDocument = new TypedDocumentString(`
    query MyMachines {
  myMachines {
    ...MachineFields
  }
}
    fragment MachineFields on Machine {
  id
  name
  gpuModel
  gpuCount
  vramGib
  country
  pricePerGpuHour
  currency
  listed
  online
  lastHeartbeatAtUtc
  gpusAllocated
  reliability
  verified
  createdAtUtc
}`) as unknown as TypedDocumentString<MyMachinesQuery, MyMachinesQueryVariables>;
export const RegisterMachineDocument = new TypedDocumentString(`
    mutation RegisterMachine($input: RegisterMachineInput!) {
  registerMachine(input: $input) {
    machine {
      ...MachineFields
    }
    agentToken
  }
}
    fragment MachineFields on Machine {
  id
  name
  gpuModel
  gpuCount
  vramGib
  country
  pricePerGpuHour
  currency
  listed
  online
  lastHeartbeatAtUtc
  gpusAllocated
  reliability
  verified
  createdAtUtc
}`) as unknown as TypedDocumentString<RegisterMachineMutation, RegisterMachineMutationVariables>;
export const SetPriceDocument = new TypedDocumentString(`
    mutation SetPrice($machineId: ID!, $price: Decimal!) {
  setMachinePricing(machineId: $machineId, pricePerGpuHour: $price) {
    ...MachineFields
  }
}
    fragment MachineFields on Machine {
  id
  name
  gpuModel
  gpuCount
  vramGib
  country
  pricePerGpuHour
  currency
  listed
  online
  lastHeartbeatAtUtc
  gpusAllocated
  reliability
  verified
  createdAtUtc
}`) as unknown as TypedDocumentString<SetPriceMutation, SetPriceMutationVariables>;
export const ListMachineDocument = new TypedDocumentString(`
    mutation ListMachine($machineId: ID!) {
  listMachine(machineId: $machineId) {
    ...MachineFields
  }
}
    fragment MachineFields on Machine {
  id
  name
  gpuModel
  gpuCount
  vramGib
  country
  pricePerGpuHour
  currency
  listed
  online
  lastHeartbeatAtUtc
  gpusAllocated
  reliability
  verified
  createdAtUtc
}`) as unknown as TypedDocumentString<ListMachineMutation, ListMachineMutationVariables>;
export const UnlistMachineDocument = new TypedDocumentString(`
    mutation UnlistMachine($machineId: ID!) {
  unlistMachine(machineId: $machineId) {
    ...MachineFields
  }
}
    fragment MachineFields on Machine {
  id
  name
  gpuModel
  gpuCount
  vramGib
  country
  pricePerGpuHour
  currency
  listed
  online
  lastHeartbeatAtUtc
  gpusAllocated
  reliability
  verified
  createdAtUtc
}`) as unknown as TypedDocumentString<UnlistMachineMutation, UnlistMachineMutationVariables>;
export const HeartbeatGapsDocument = new TypedDocumentString(`
    query HeartbeatGaps($machineId: ID!) {
  heartbeatGaps(machineId: $machineId) {
    startedAtUtc
    endedAtUtc
    seconds
  }
}
    `) as unknown as TypedDocumentString<HeartbeatGapsQuery, HeartbeatGapsQueryVariables>;
export const HostMachineGpusDocument = new TypedDocumentString(`
    query HostMachineGpus {
  myMachines {
    id
    gpus {
      ...MachineGpuFields
    }
  }
  gpuModels {
    name
    migProfiles {
      name
      memorySlices
      memoryGib
    }
  }
}
    fragment MachineGpuFields on MachineGpu {
  index
  mode
  rentedWhole
  layout {
    profile
    start
  }
  slices {
    profile
    start
    size
    instanceId
  }
}`) as unknown as TypedDocumentString<HostMachineGpusQuery, HostMachineGpusQueryVariables>;
export const SetGpuModeDocument = new TypedDocumentString(`
    mutation SetGpuMode($input: SetGpuModeInput!) {
  setGpuMode(input: $input) {
    ...MachineGpuFields
  }
}
    fragment MachineGpuFields on MachineGpu {
  index
  mode
  rentedWhole
  layout {
    profile
    start
  }
  slices {
    profile
    start
    size
    instanceId
  }
}`) as unknown as TypedDocumentString<SetGpuModeMutation, SetGpuModeMutationVariables>;
export const MyHostProfileDocument = new TypedDocumentString(`
    query MyHostProfile {
  hostProfile {
    ...HostProfileFields
  }
}
    fragment HostProfileFields on HostProfile {
  legalName
  country
  payoutCurrency
  verification
  verificationReason
  updatedAtUtc
}`) as unknown as TypedDocumentString<MyHostProfileQuery, MyHostProfileQueryVariables>;
export const UpdateHostProfileDocument = new TypedDocumentString(`
    mutation UpdateHostProfile($input: HostProfileInput!) {
  updateHostProfile(input: $input) {
    ...HostProfileFields
  }
}
    fragment HostProfileFields on HostProfile {
  legalName
  country
  payoutCurrency
  verification
  verificationReason
  updatedAtUtc
}`) as unknown as TypedDocumentString<UpdateHostProfileMutation, UpdateHostProfileMutationVariables>;
export const MyPayoutAccountDocument = new TypedDocumentString(`
    query MyPayoutAccount {
  payoutAccount {
    ...PayoutAccountFields
  }
}
    fragment PayoutAccountFields on PayoutAccount {
  stripeAccountId
  country
  email
  transfersStatus
  payoutsEnabled
  detailsSubmitted
  createdAtUtc
}`) as unknown as TypedDocumentString<MyPayoutAccountQuery, MyPayoutAccountQueryVariables>;
export const CreatePayoutOnboardingLinkDocument = new TypedDocumentString(`
    mutation CreatePayoutOnboardingLink {
  createPayoutOnboardingLink {
    url
    expiresAtUtc
  }
}
    `) as unknown as TypedDocumentString<CreatePayoutOnboardingLinkMutation, CreatePayoutOnboardingLinkMutationVariables>;
export const CreatePayoutAccountDocument = new TypedDocumentString(`
    mutation CreatePayoutAccount($country: String!, $email: String) {
  createPayoutAccount(country: $country, email: $email) {
    ...PayoutAccountFields
  }
}
    fragment PayoutAccountFields on PayoutAccount {
  stripeAccountId
  country
  email
  transfersStatus
  payoutsEnabled
  detailsSubmitted
  createdAtUtc
}`) as unknown as TypedDocumentString<CreatePayoutAccountMutation, CreatePayoutAccountMutationVariables>;
export const PlatformFeeRateDocument = new TypedDocumentString(`
    query PlatformFeeRate {
  platform {
    platformFeeRate
  }
}
    `) as unknown as TypedDocumentString<PlatformFeeRateQuery, PlatformFeeRateQueryVariables>;
export const HostEarningsOverviewDocument = new TypedDocumentString(`
    query HostEarningsOverview($from: DateTime!, $to: DateTime!) {
  hostEarnings {
    total
    currency
  }
  earningsByMachine(fromUtc: $from, toUtc: $to) {
    fromUtc
    toUtc
    currency
    days {
      dayUtc
      machineId
      gpuModel
      seconds
      gross
      fee
      net
      downtimeCredits
      total
    }
    totalGross
    totalFee
    totalNet
    total
  }
}
    `) as unknown as TypedDocumentString<HostEarningsOverviewQuery, HostEarningsOverviewQueryVariables>;
export const HostStatementsAndPayoutsDocument = new TypedDocumentString(`
    query HostStatementsAndPayouts {
  statements {
    id
    number
    state
    periodStartUtc
    periodEndUtc
    currency
    earnings
    payouts
  }
  payouts {
    id
    amount
    currency
    state
    failureReason
    createdAtUtc
    paidAtUtc
  }
}
    `) as unknown as TypedDocumentString<HostStatementsAndPayoutsQuery, HostStatementsAndPayoutsQueryVariables>;
export const HostStatementDocument = new TypedDocumentString(`
    query HostStatement($id: ID!) {
  statement(id: $id) {
    ...StatementFields
  }
}
    fragment StatementFields on Statement {
  id
  number
  state
  periodStartUtc
  periodEndUtc
  currency
  seconds
  gross
  fee
  net
  downtimeCredits
  earnings
  adjustments
  payouts
  openingBalance
  closingBalance
  finalizedAtUtc
  lines {
    machineId
    gpuModel
    meterKind
    earlierPeriod
    seconds
    gross
    fee
    net
    downtimeCredits
    amount
    postings
  }
}`) as unknown as TypedDocumentString<HostStatementQuery, HostStatementQueryVariables>;
export const HostStatementPreviewDocument = new TypedDocumentString(`
    query HostStatementPreview {
  statementPreview {
    ...StatementFields
  }
}
    fragment StatementFields on Statement {
  id
  number
  state
  periodStartUtc
  periodEndUtc
  currency
  seconds
  gross
  fee
  net
  downtimeCredits
  earnings
  adjustments
  payouts
  openingBalance
  closingBalance
  finalizedAtUtc
  lines {
    machineId
    gpuModel
    meterKind
    earlierPeriod
    seconds
    gross
    fee
    net
    downtimeCredits
    amount
    postings
  }
}`) as unknown as TypedDocumentString<HostStatementPreviewQuery, HostStatementPreviewQueryVariables>;
export const ApiKeysPageDocument = new TypedDocumentString(`
    query ApiKeysPage($includeRevoked: Boolean!) {
  apiKeys(includeRevoked: $includeRevoked) {
    ...ApiKeyFields
  }
  me {
    email
    scopes
  }
}
    fragment ApiKeyFields on ApiKey {
  id
  name
  prefix
  scopes
  ownerEmail
  createdAtUtc
  lastUsedAtUtc
  revokedAtUtc
}`) as unknown as TypedDocumentString<ApiKeysPageQuery, ApiKeysPageQueryVariables>;
export const CreateApiKeyDocument = new TypedDocumentString(`
    mutation CreateApiKey($input: CreateApiKeyInput!) {
  createApiKey(input: $input) {
    apiKey {
      ...ApiKeyFields
    }
    secret
  }
}
    fragment ApiKeyFields on ApiKey {
  id
  name
  prefix
  scopes
  ownerEmail
  createdAtUtc
  lastUsedAtUtc
  revokedAtUtc
}`) as unknown as TypedDocumentString<CreateApiKeyMutation, CreateApiKeyMutationVariables>;
export const RevokeApiKeyDocument = new TypedDocumentString(`
    mutation RevokeApiKey($id: ID!) {
  revokeApiKey(id: $id) {
    ...ApiKeyFields
  }
}
    fragment ApiKeyFields on ApiKey {
  id
  name
  prefix
  scopes
  ownerEmail
  createdAtUtc
  lastUsedAtUtc
  revokedAtUtc
}`) as unknown as TypedDocumentString<RevokeApiKeyMutation, RevokeApiKeyMutationVariables>;
export const HostMachineReservationsDocument = new TypedDocumentString(`
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
}`) as unknown as TypedDocumentString<HostMachineReservationsQuery, HostMachineReservationsQueryVariables>;
export const SetReservedTermsDocument = new TypedDocumentString(`
    mutation SetReservedTerms($machineId: ID!, $terms: ReservedTermsInput) {
  setReservedTerms(machineId: $machineId, terms: $terms) {
    pricePerGpuHour
    maxLeadDays
    minBlockHours
    currency
  }
}
    `) as unknown as TypedDocumentString<SetReservedTermsMutation, SetReservedTermsMutationVariables>;
export const CancelReservationDocument = new TypedDocumentString(`
    mutation CancelReservation($id: ID!, $reason: String!) {
  cancelReservation(id: $id, reason: $reason) {
    ...HostReservationFields
  }
}
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
}`) as unknown as TypedDocumentString<CancelReservationMutation, CancelReservationMutationVariables>;
export const WebhooksPageDocument = new TypedDocumentString(`
    query WebhooksPage {
  webhookEventTypes {
    name
    description
  }
  webhookEndpoints {
    ...WebhookEndpointFields
  }
}
    fragment WebhookEndpointFields on WebhookEndpoint {
  id
  url
  description
  eventTypes
  enabled
  disabledReason
  disabledAt
  previousSecretUntil
  createdAt
  updatedAt
}`) as unknown as TypedDocumentString<WebhooksPageQuery, WebhooksPageQueryVariables>;
export const WebhookDeliveriesDocument = new TypedDocumentString(`
    query WebhookDeliveries($endpointId: ID, $limit: Int) {
  webhookDeliveries(endpointId: $endpointId, limit: $limit) {
    ...WebhookDeliveryFields
  }
}
    fragment WebhookDeliveryFields on WebhookDelivery {
  id
  webhookId
  endpointId
  eventType
  status
  attempts
  nextAttemptAt
  deliveredAt
  createdAt
  payload
  attemptLog {
    startedAt
    statusCode
    succeeded
    latencyMs
    responseHead
    error
  }
}`) as unknown as TypedDocumentString<WebhookDeliveriesQuery, WebhookDeliveriesQueryVariables>;
export const CreateWebhookEndpointDocument = new TypedDocumentString(`
    mutation CreateWebhookEndpoint($input: CreateWebhookEndpointInput!) {
  createWebhookEndpoint(input: $input) {
    secret
    endpoint {
      ...WebhookEndpointFields
    }
  }
}
    fragment WebhookEndpointFields on WebhookEndpoint {
  id
  url
  description
  eventTypes
  enabled
  disabledReason
  disabledAt
  previousSecretUntil
  createdAt
  updatedAt
}`) as unknown as TypedDocumentString<CreateWebhookEndpointMutation, CreateWebhookEndpointMutationVariables>;
export const UpdateWebhookEndpointDocument = new TypedDocumentString(`
    mutation UpdateWebhookEndpoint($id: ID!, $input: UpdateWebhookEndpointInput!) {
  updateWebhookEndpoint(id: $id, input: $input) {
    ...WebhookEndpointFields
  }
}
    fragment WebhookEndpointFields on WebhookEndpoint {
  id
  url
  description
  eventTypes
  enabled
  disabledReason
  disabledAt
  previousSecretUntil
  createdAt
  updatedAt
}`) as unknown as TypedDocumentString<UpdateWebhookEndpointMutation, UpdateWebhookEndpointMutationVariables>;
export const DeleteWebhookEndpointDocument = new TypedDocumentString(`
    mutation DeleteWebhookEndpoint($id: ID!) {
  deleteWebhookEndpoint(id: $id)
}
    `) as unknown as TypedDocumentString<DeleteWebhookEndpointMutation, DeleteWebhookEndpointMutationVariables>;
export const RotateWebhookSecretDocument = new TypedDocumentString(`
    mutation RotateWebhookSecret($id: ID!) {
  rotateWebhookSecret(id: $id) {
    secret
    endpoint {
      ...WebhookEndpointFields
    }
  }
}
    fragment WebhookEndpointFields on WebhookEndpoint {
  id
  url
  description
  eventTypes
  enabled
  disabledReason
  disabledAt
  previousSecretUntil
  createdAt
  updatedAt
}`) as unknown as TypedDocumentString<RotateWebhookSecretMutation, RotateWebhookSecretMutationVariables>;
export const SendWebhookTestDocument = new TypedDocumentString(`
    mutation SendWebhookTest($endpointId: ID!) {
  sendWebhookTest(endpointId: $endpointId) {
    ...WebhookDeliveryFields
  }
}
    fragment WebhookDeliveryFields on WebhookDelivery {
  id
  webhookId
  endpointId
  eventType
  status
  attempts
  nextAttemptAt
  deliveredAt
  createdAt
  payload
  attemptLog {
    startedAt
    statusCode
    succeeded
    latencyMs
    responseHead
    error
  }
}`) as unknown as TypedDocumentString<SendWebhookTestMutation, SendWebhookTestMutationVariables>;
export const RedeliverWebhookDocument = new TypedDocumentString(`
    mutation RedeliverWebhook($deliveryId: ID!) {
  redeliverWebhook(deliveryId: $deliveryId) {
    ...WebhookDeliveryFields
  }
}
    fragment WebhookDeliveryFields on WebhookDelivery {
  id
  webhookId
  endpointId
  eventType
  status
  attempts
  nextAttemptAt
  deliveredAt
  createdAt
  payload
  attemptLog {
    startedAt
    statusCode
    succeeded
    latencyMs
    responseHead
    error
  }
}`) as unknown as TypedDocumentString<RedeliverWebhookMutation, RedeliverWebhookMutationVariables>;
/* eslint-disable */
/** Internal type. DO NOT USE DIRECTLY. */
type Exact<T extends { [key: string]: unknown }> = { [K in keyof T]: T[K] };
/** Internal type. DO NOT USE DIRECTLY. */
export type Incremental<T> = T | { [P in keyof T]?: P extends ' $fragmentName' | '__typename' ? T[P] : never };
import type { DocumentTypeDecoration } from '@graphql-typed-document-node/core';
export type DiskType =
  | 'HDD'
  | 'NVME'
  | 'SSD';

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

export type SignUpInput = {
  email: string;
  /** At least 8 characters. */
  password: string;
  /** RENTER, HOST or both. */
  roles: Array<TenantRole>;
  tenantName: string;
};

export type TenantRole =
  | 'HOST'
  /** The marketplace's own tenant; cannot be chosen at sign-up. */
  | 'PLATFORM'
  | 'RENTER';

export type Verification =
  | 'SUSPENDED'
  | 'UNVERIFIED'
  | 'VERIFIED';

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


export type BillingSpendSeriesQuery = { usageSeries: { from: string, to: string, currency: string, totalSpend: string, totalSeconds: number, points: Array<{ bucketStart: string, key: string | null, seconds: number, spend: string }> } };

export type BillingInstancesQueryVariables = Exact<{ [key: string]: never; }>;


export type BillingInstancesQuery = { instances: Array<{ id: string, gpuModel: string, gpuCount: number, rentalType: string, pricePerGpuHour: string, pricePerHourTotal: string, storagePricePerGbMonth: string, currency: string, status: string, statusReason: string | null, runningAt: string | null, stoppedAt: string | null, createdAt: string }>, usage: Array<{ id: string, instanceId: string, meter: string, startedAt: string | null, endedAt: string | null, billedSeconds: number | null, pricePerHour: string, currency: string }> };

export type BillingInvoicesQueryVariables = Exact<{ [key: string]: never; }>;


export type BillingInvoicesQuery = { invoices: Array<{ id: string, number: number, status: string, periodStart: string, periodEnd: string, currency: string, subtotal: string, total: string, exactTotal: string, rounding: string, finalizedAt: string | null, paidAt: string | null, lines: Array<{ instanceId: string, meter: string, quantity: number, unit: string, unitPrice: string, pricingUnit: string, pricingQuantity: string, earlierPeriod: boolean, amount: string, exactAmount: string }> }> };

export type BillingUsageCsvQueryVariables = Exact<{
  invoiceId: string | number;
}>;


export type BillingUsageCsvQuery = { invoiceUsageCsv: string };

export type SignUpMutationVariables = Exact<{
  input: SignUpInput;
}>;


export type SignUpMutation = { signUp: { token: string, expiresAt: string, me: { email: string, tenantRoles: Array<TenantRole> } } };

export type LogInMutationVariables = Exact<{
  email: string;
  password: string;
}>;


export type LogInMutation = { login: { token: string, expiresAt: string, me: { email: string, tenantRoles: Array<TenantRole> } } };

export type MeFieldsFragment = { email: string, tenantRoles: Array<TenantRole> };

export type GpuCatalogQueryVariables = Exact<{ [key: string]: never; }>;


export type GpuCatalogQuery = { gpuModels: Array<{ name: string, vramGib: number, architecture: string }> };

export type MachineFieldsFragment = { id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAt: string | null, gpusAllocated: number, reliability: string | null, verified: boolean, createdAt: string };

export type MyMachinesQueryVariables = Exact<{ [key: string]: never; }>;


export type MyMachinesQuery = { myMachines: Array<{ id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAt: string | null, gpusAllocated: number, reliability: string | null, verified: boolean, createdAt: string }> };

export type RegisterMachineMutationVariables = Exact<{
  input: RegisterMachineInput;
}>;


export type RegisterMachineMutation = { registerMachine: { agentToken: string | null, machine: { id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAt: string | null, gpusAllocated: number, reliability: string | null, verified: boolean, createdAt: string } } };

export type SetPriceMutationVariables = Exact<{
  machineId: string | number;
  price: string;
}>;


export type SetPriceMutation = { setMachinePricing: { id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAt: string | null, gpusAllocated: number, reliability: string | null, verified: boolean, createdAt: string } };

export type ListMachineMutationVariables = Exact<{
  machineId: string | number;
}>;


export type ListMachineMutation = { listMachine: { id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAt: string | null, gpusAllocated: number, reliability: string | null, verified: boolean, createdAt: string } };

export type UnlistMachineMutationVariables = Exact<{
  machineId: string | number;
}>;


export type UnlistMachineMutation = { unlistMachine: { id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAt: string | null, gpusAllocated: number, reliability: string | null, verified: boolean, createdAt: string } };

export type HeartbeatGapsQueryVariables = Exact<{
  machineId: string | number;
}>;


export type HeartbeatGapsQuery = { heartbeatGaps: Array<{ startedAt: string, endedAt: string | null, seconds: number }> };

export type MyHostProfileQueryVariables = Exact<{ [key: string]: never; }>;


export type MyHostProfileQuery = { hostProfile: { legalName: string | null, country: string | null, payoutCurrency: string | null, verification: Verification, verificationReason: string | null, updatedAt: string } };

export type HostEarningsOverviewQueryVariables = Exact<{
  from: string;
  to: string;
}>;


export type HostEarningsOverviewQuery = { hostEarnings: { total: string, currency: string, postings: Array<{ feeRate: string, postedAt: string }> }, earningsByMachine: { from: string, to: string, currency: string, totalGross: string, totalFee: string, totalNet: string, total: string, days: Array<{ day: string, machineId: string | null, gpuModel: string | null, seconds: number, gross: string, fee: string, net: string, downtimeCredits: string, total: string }> } };

export type HostStatementsAndPayoutsQueryVariables = Exact<{ [key: string]: never; }>;


export type HostStatementsAndPayoutsQuery = { statements: Array<{ id: string | null, number: number | null, status: string, periodStart: string, periodEnd: string, currency: string, earnings: string, payouts: string }>, payouts: Array<{ id: string, amount: string, currency: string, status: string, failureReason: string | null, createdAt: string, paidAt: string | null }> };

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
  lastHeartbeatAt
  gpusAllocated
  reliability
  verified
  createdAt
}
    `, {"fragmentName":"MachineFields"}) as unknown as TypedDocumentString<MachineFieldsFragment, unknown>;
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
    query BillingSpendSeries($from: String!, $to: String!) {
  usageSeries(bucket: DAY, groupBy: GPU_MODEL, from: $from, to: $to) {
    from
    to
    currency
    totalSpend
    totalSeconds
    points {
      bucketStart
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
    rentalType
    pricePerGpuHour
    pricePerHourTotal
    storagePricePerGbMonth
    currency
    status
    statusReason
    runningAt
    stoppedAt
    createdAt
  }
  usage {
    id
    instanceId
    meter
    startedAt
    endedAt
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
    status
    periodStart
    periodEnd
    currency
    subtotal
    total
    exactTotal
    rounding
    finalizedAt
    paidAt
    lines {
      instanceId
      meter
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
export const SignUpDocument = new TypedDocumentString(`
    mutation SignUp($input: SignUpInput!) {
  signUp(input: $input) {
    token
    expiresAt
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
    expiresAt
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
  lastHeartbeatAt
  gpusAllocated
  reliability
  verified
  createdAt
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
  lastHeartbeatAt
  gpusAllocated
  reliability
  verified
  createdAt
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
  lastHeartbeatAt
  gpusAllocated
  reliability
  verified
  createdAt
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
  lastHeartbeatAt
  gpusAllocated
  reliability
  verified
  createdAt
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
  lastHeartbeatAt
  gpusAllocated
  reliability
  verified
  createdAt
}`) as unknown as TypedDocumentString<UnlistMachineMutation, UnlistMachineMutationVariables>;
export const HeartbeatGapsDocument = new TypedDocumentString(`
    query HeartbeatGaps($machineId: ID!) {
  heartbeatGaps(machineId: $machineId) {
    startedAt
    endedAt
    seconds
  }
}
    `) as unknown as TypedDocumentString<HeartbeatGapsQuery, HeartbeatGapsQueryVariables>;
export const MyHostProfileDocument = new TypedDocumentString(`
    query MyHostProfile {
  hostProfile {
    legalName
    country
    payoutCurrency
    verification
    verificationReason
    updatedAt
  }
}
    `) as unknown as TypedDocumentString<MyHostProfileQuery, MyHostProfileQueryVariables>;
export const HostEarningsOverviewDocument = new TypedDocumentString(`
    query HostEarningsOverview($from: String!, $to: String!) {
  hostEarnings {
    total
    currency
    postings {
      feeRate
      postedAt
    }
  }
  earningsByMachine(from: $from, to: $to) {
    from
    to
    currency
    days {
      day
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
    status
    periodStart
    periodEnd
    currency
    earnings
    payouts
  }
  payouts {
    id
    amount
    currency
    status
    failureReason
    createdAt
    paidAt
  }
}
    `) as unknown as TypedDocumentString<HostStatementsAndPayoutsQuery, HostStatementsAndPayoutsQueryVariables>;
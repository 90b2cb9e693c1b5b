// Every operation the front end sends, typed by `npm run codegen` from
// api-specs/graphql/schema.graphql.
import { graphql } from './gql';

export const SignUp = graphql(`
  mutation SignUp($input: SignUpInput!) {
    signUp(input: $input) {
      token
      expiresAtUtc
      me {
        ...MeFields
      }
    }
  }
`);

export const LogIn = graphql(`
  mutation LogIn($email: String!, $password: String!) {
    login(email: $email, password: $password) {
      token
      expiresAtUtc
      me {
        ...MeFields
      }
    }
  }
`);

export const MeFields = graphql(`
  fragment MeFields on Me {
    email
    tenantRoles
  }
`);

export const GpuCatalog = graphql(`
  query GpuCatalog {
    gpuModels {
      name
      vramGib
      architecture
    }
  }
`);

export const MachineFieldsFragment = graphql(`
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
`);

export const MyMachines = graphql(`
  query MyMachines {
    myMachines {
      ...MachineFields
    }
  }
`);

export const RegisterMachine = graphql(`
  mutation RegisterMachine($input: RegisterMachineInput!) {
    registerMachine(input: $input) {
      machine {
        ...MachineFields
      }
      agentToken
    }
  }
`);

export const SetPrice = graphql(`
  mutation SetPrice($machineId: ID!, $price: Decimal!) {
    setMachinePricing(machineId: $machineId, pricePerGpuHour: $price) {
      ...MachineFields
    }
  }
`);

export const ListMachine = graphql(`
  mutation ListMachine($machineId: ID!) {
    listMachine(machineId: $machineId) {
      ...MachineFields
    }
  }
`);

export const UnlistMachine = graphql(`
  mutation UnlistMachine($machineId: ID!) {
    unlistMachine(machineId: $machineId) {
      ...MachineFields
    }
  }
`);

export const HeartbeatGaps = graphql(`
  query HeartbeatGaps($machineId: ID!) {
    heartbeatGaps(machineId: $machineId) {
      startedAtUtc
      endedAtUtc
      seconds
    }
  }
`);

export const MachineGpuFieldsFragment = graphql(`
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
`);

/**
 * The GPUs of the host's machines, whole or MIG, with the slices in use, and
 * each model's MIG profiles (whether a machine can run MIG at all, and how
 * many memory slices a fixed layout's slot spans). Asked for only while a
 * machine's GPU section is open: the API reads each machine's GPUs apart.
 */
export const HostMachineGpus = graphql(`
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
`);

export const SetGpuMode = graphql(`
  mutation SetGpuMode($input: SetGpuModeInput!) {
    setGpuMode(input: $input) {
      ...MachineGpuFields
    }
  }
`);

export const HostProfileFieldsFragment = graphql(`
  fragment HostProfileFields on HostProfile {
    legalName
    country
    payoutCurrency
    verification
    verificationReason
    updatedAtUtc
  }
`);

export const MyHostProfile = graphql(`
  query MyHostProfile {
    hostProfile {
      ...HostProfileFields
    }
  }
`);

export const UpdateHostProfile = graphql(`
  mutation UpdateHostProfile($input: HostProfileInput!) {
    updateHostProfile(input: $input) {
      ...HostProfileFields
    }
  }
`);

export const PayoutAccountFieldsFragment = graphql(`
  fragment PayoutAccountFields on PayoutAccount {
    stripeAccountId
    country
    email
    transfersStatus
    payoutsEnabled
    detailsSubmitted
    createdAtUtc
  }
`);

export const MyPayoutAccount = graphql(`
  query MyPayoutAccount {
    payoutAccount {
      ...PayoutAccountFields
    }
  }
`);

export const CreatePayoutOnboardingLink = graphql(`
  mutation CreatePayoutOnboardingLink {
    createPayoutOnboardingLink {
      url
      expiresAtUtc
    }
  }
`);

export const CreatePayoutAccount = graphql(`
  mutation CreatePayoutAccount($country: String!, $email: String) {
    createPayoutAccount(country: $country, email: $email) {
      ...PayoutAccountFields
    }
  }
`);

/** The marketplace's public terms: the fee the earnings preview takes off. */
export const PlatformFeeRate = graphql(`
  query PlatformFeeRate {
    platform {
      platformFeeRate
    }
  }
`);

export const HostEarningsOverview = graphql(`
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
`);

export const HostStatementsAndPayouts = graphql(`
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
`);

export const StatementFieldsFragment = graphql(`
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
`);

export const HostStatement = graphql(`
  query HostStatement($id: ID!) {
    statement(id: $id) {
      ...StatementFields
    }
  }
`);

export const HostStatementPreview = graphql(`
  query HostStatementPreview {
    statementPreview {
      ...StatementFields
    }
  }
`);

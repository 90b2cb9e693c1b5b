/* eslint-disable */
import * as types from './graphql';



/**
 * Map of all GraphQL operations in the project.
 *
 * This map has several performance disadvantages:
 * 1. It is not tree-shakeable, so it will include all operations in the project.
 * 2. It is not minifiable, so the string of a GraphQL query will be multiple times inside the bundle.
 * 3. It does not support dead code elimination, so it will add unused operations.
 *
 * Therefore it is highly recommended to use the babel or swc plugin for production.
 * Learn more about it here: https://the-guild.dev/graphql/codegen/plugins/presets/preset-client#reducing-bundle-size
 */
type Documents = {
    "\n  mutation BillingLogIn($email: String!, $password: String!) {\n    login(email: $email, password: $password) {\n      token\n      me {\n        email\n        tenantRoles\n      }\n    }\n  }\n": typeof types.BillingLogInDocument,
    "\n  query BillingRunway {\n    runway {\n      balance\n      currency\n      burnRatePerHour\n      runningInstances\n      runwaySeconds\n      low\n      warnBelowSeconds\n    }\n  }\n": typeof types.BillingRunwayDocument,
    "\n  query BillingSpendSeries($from: DateTime!, $to: DateTime!) {\n    usageSeries(bucket: DAY, groupBy: GPU_MODEL, fromUtc: $from, toUtc: $to) {\n      fromUtc\n      toUtc\n      currency\n      totalSpend\n      totalSeconds\n      points {\n        bucketStartUtc\n        key\n        seconds\n        spend\n      }\n    }\n  }\n": typeof types.BillingSpendSeriesDocument,
    "\n  query BillingInstances {\n    instances {\n      id\n      gpuModel\n      gpuCount\n      rental\n      pricePerGpuHour\n      pricePerHourTotal\n      storagePricePerGbMonth\n      currency\n      state\n      statusReason\n      runningAtUtc\n      stoppedAtUtc\n      createdAtUtc\n      costSoFar\n      billedSeconds\n    }\n    usage {\n      id\n      instanceId\n      meterKind\n      startedAtUtc\n      endedAtUtc\n      billedSeconds\n      pricePerHour\n      currency\n    }\n  }\n": typeof types.BillingInstancesDocument,
    "\n  query BillingInvoices {\n    invoices {\n      id\n      number\n      state\n      periodStartUtc\n      periodEndUtc\n      currency\n      subtotal\n      total\n      exactTotal\n      rounding\n      finalizedAtUtc\n      paidAtUtc\n      lines {\n        instanceId\n        meterKind\n        quantity\n        unit\n        unitPrice\n        pricingUnit\n        pricingQuantity\n        earlierPeriod\n        amount\n        exactAmount\n      }\n    }\n  }\n": typeof types.BillingInvoicesDocument,
    "\n  query BillingUsageCsv($invoiceId: ID!) {\n    invoiceUsageCsv(invoiceId: $invoiceId)\n  }\n": typeof types.BillingUsageCsvDocument,
    "\n  query BillingBalanceHistory($first: Int, $after: String) {\n    balanceHistory(first: $first, after: $after) {\n      balance\n      currency\n      nodes {\n        kind\n        description\n        instanceId\n        amount\n        balanceAfter\n        postedAtUtc\n        cursor\n      }\n      pageInfo {\n        endCursor\n        hasNextPage\n      }\n    }\n  }\n": typeof types.BillingBalanceHistoryDocument,
    "\n  query OperatorViewer {\n    me {\n      operator\n      tenantRoles\n    }\n  }\n": typeof types.OperatorViewerDocument,
    "\n  query OperatorMarketplace($from: DateTime!, $to: DateTime!, $nearQuotaPercent: Int) {\n    marketplaceOverview(fromUtc: $from, toUtc: $to, bucket: DAY, nearQuotaPercent: $nearQuotaPercent) {\n      from\n      to\n      volume {\n        currency\n        totalVolume\n        totalHostEarnings\n        totalFees\n        totalFeeAdjustments\n        totalFeeRevenue\n        totalPostings\n        totalSeconds\n        points {\n          bucketStartUtc\n          volume\n          hostEarnings\n          fees\n          feeAdjustments\n          postings\n        }\n      }\n      gpuSupply {\n        atUtc\n        listedGpus\n        onlineGpus\n        rentedGpus\n        rentedListedGpus\n        models {\n          gpuModel\n          listedMachines\n          listedGpus\n          onlineGpus\n          rentedGpus\n          rentedListedGpus\n        }\n      }\n      nearQuota {\n        thresholdPercent\n        currency\n        tenants {\n          tenantId\n          tenantName\n          dimensions {\n            quota\n            limit\n            used\n            percent\n          }\n        }\n      }\n      outOfCredit {\n        currency\n        warnBelowSeconds\n        tenants {\n          tenantId\n          tenantName\n          reasons\n          balance\n          burnPerHour\n          runwaySeconds\n          lowSinceUtc\n          lastChargedAtUtc\n        }\n      }\n    }\n  }\n": typeof types.OperatorMarketplaceDocument,
    "\n  fragment RenterReservationFields on Reservation {\n    id\n    machineId\n    gpuModel\n    gpuCount\n    gpuIndices\n    startsAt\n    endsAt\n    hours\n    hoursLeft\n    pricePerGpuHour\n    amount\n    currency\n    state\n    parentId\n    reason\n    sold {\n      startsAt\n      endsAt\n    }\n    escrow {\n      amount\n      released\n      fees\n      refunded\n      penalty\n      remaining\n      state\n    }\n  }\n": typeof types.RenterReservationFieldsFragmentDoc,
    "\n  fragment ResaleListingFields on ResaleListing {\n    id\n    reservationId\n    machineId\n    gpuModel\n    gpuCount\n    startsAt\n    endsAt\n    hours\n    pricePerGpuHour\n    amount\n    currency\n    state\n    createdAt\n  }\n": typeof types.ResaleListingFieldsFragmentDoc,
    "\n  query BillingReservations($from: DateTime!) {\n    reservations {\n      ...RenterReservationFields\n    }\n    myListings {\n      ...ResaleListingFields\n    }\n    resaleListings(filter: { from: $from }) {\n      ...ResaleListingFields\n    }\n    reservationTerms {\n      resaleFeeRate\n      cancellationPenaltyRate\n    }\n  }\n": typeof types.BillingReservationsDocument,
    "\n  mutation ListReservationHours($input: ListReservationHoursInput!) {\n    listReservationHours(input: $input) {\n      ...ResaleListingFields\n    }\n  }\n": typeof types.ListReservationHoursDocument,
    "\n  mutation WithdrawListing($id: ID!) {\n    withdrawListing(id: $id) {\n      ...ResaleListingFields\n    }\n  }\n": typeof types.WithdrawListingDocument,
    "\n  mutation BuyReservationHours($input: BuyReservationHoursInput!) {\n    buyReservationHours(input: $input) {\n      ...RenterReservationFields\n    }\n  }\n": typeof types.BuyReservationHoursDocument,
    "\n  query TopUpPlatform {\n    platform {\n      currency\n      stripePublishableKey\n    }\n    me {\n      tenantRoles\n    }\n  }\n": typeof types.TopUpPlatformDocument,
    "\n  query TopUpState {\n    balance {\n      amount\n      currency\n    }\n    topUps {\n      id\n      amount\n      currency\n      status\n      createdAtUtc\n      succeededAtUtc\n    }\n  }\n": typeof types.TopUpStateDocument,
    "\n  mutation TopUpCreate($amount: Decimal!, $idempotencyKey: String) {\n    createTopUp(amount: $amount, idempotencyKey: $idempotencyKey) {\n      id\n      amount\n      currency\n      status\n      clientSecret\n      paymentIntentId\n      createdAtUtc\n    }\n  }\n": typeof types.TopUpCreateDocument,
    "\n  mutation SignUp($input: SignUpInput!) {\n    signUp(input: $input) {\n      token\n      expiresAtUtc\n      me {\n        ...MeFields\n      }\n    }\n  }\n": typeof types.SignUpDocument,
    "\n  mutation LogIn($email: String!, $password: String!) {\n    login(email: $email, password: $password) {\n      token\n      expiresAtUtc\n      me {\n        ...MeFields\n      }\n    }\n  }\n": typeof types.LogInDocument,
    "\n  fragment MeFields on Me {\n    email\n    tenantRoles\n  }\n": typeof types.MeFieldsFragmentDoc,
    "\n  query GpuCatalog {\n    gpuModels {\n      name\n      vramGib\n      architecture\n    }\n  }\n": typeof types.GpuCatalogDocument,
    "\n  fragment MachineFields on Machine {\n    id\n    name\n    gpuModel\n    gpuCount\n    vramGib\n    country\n    pricePerGpuHour\n    currency\n    listed\n    online\n    lastHeartbeatAtUtc\n    gpusAllocated\n    reliability\n    verified\n    createdAtUtc\n  }\n": typeof types.MachineFieldsFragmentDoc,
    "\n  query MyMachines {\n    myMachines {\n      ...MachineFields\n    }\n  }\n": typeof types.MyMachinesDocument,
    "\n  mutation RegisterMachine($input: RegisterMachineInput!) {\n    registerMachine(input: $input) {\n      machine {\n        ...MachineFields\n      }\n      agentToken\n    }\n  }\n": typeof types.RegisterMachineDocument,
    "\n  mutation SetPrice($machineId: ID!, $price: Decimal!) {\n    setMachinePricing(machineId: $machineId, pricePerGpuHour: $price) {\n      ...MachineFields\n    }\n  }\n": typeof types.SetPriceDocument,
    "\n  mutation ListMachine($machineId: ID!) {\n    listMachine(machineId: $machineId) {\n      ...MachineFields\n    }\n  }\n": typeof types.ListMachineDocument,
    "\n  mutation UnlistMachine($machineId: ID!) {\n    unlistMachine(machineId: $machineId) {\n      ...MachineFields\n    }\n  }\n": typeof types.UnlistMachineDocument,
    "\n  query HeartbeatGaps($machineId: ID!) {\n    heartbeatGaps(machineId: $machineId) {\n      startedAtUtc\n      endedAtUtc\n      seconds\n    }\n  }\n": typeof types.HeartbeatGapsDocument,
    "\n  fragment MachineGpuFields on MachineGpu {\n    index\n    mode\n    rentedWhole\n    layout {\n      profile\n      start\n    }\n    slices {\n      profile\n      start\n      size\n      instanceId\n    }\n  }\n": typeof types.MachineGpuFieldsFragmentDoc,
    "\n  query HostMachineGpus {\n    myMachines {\n      id\n      gpus {\n        ...MachineGpuFields\n      }\n    }\n    gpuModels {\n      name\n      migProfiles {\n        name\n        memorySlices\n        memoryGib\n      }\n    }\n  }\n": typeof types.HostMachineGpusDocument,
    "\n  mutation SetGpuMode($input: SetGpuModeInput!) {\n    setGpuMode(input: $input) {\n      ...MachineGpuFields\n    }\n  }\n": typeof types.SetGpuModeDocument,
    "\n  fragment HostProfileFields on HostProfile {\n    legalName\n    country\n    payoutCurrency\n    verification\n    verificationReason\n    updatedAtUtc\n  }\n": typeof types.HostProfileFieldsFragmentDoc,
    "\n  query MyHostProfile {\n    hostProfile {\n      ...HostProfileFields\n    }\n  }\n": typeof types.MyHostProfileDocument,
    "\n  mutation UpdateHostProfile($input: HostProfileInput!) {\n    updateHostProfile(input: $input) {\n      ...HostProfileFields\n    }\n  }\n": typeof types.UpdateHostProfileDocument,
    "\n  fragment PayoutAccountFields on PayoutAccount {\n    stripeAccountId\n    country\n    email\n    transfersStatus\n    payoutsEnabled\n    detailsSubmitted\n    createdAtUtc\n  }\n": typeof types.PayoutAccountFieldsFragmentDoc,
    "\n  query MyPayoutAccount {\n    payoutAccount {\n      ...PayoutAccountFields\n    }\n  }\n": typeof types.MyPayoutAccountDocument,
    "\n  mutation CreatePayoutOnboardingLink {\n    createPayoutOnboardingLink {\n      url\n      expiresAtUtc\n    }\n  }\n": typeof types.CreatePayoutOnboardingLinkDocument,
    "\n  mutation CreatePayoutAccount($country: String!, $email: String) {\n    createPayoutAccount(country: $country, email: $email) {\n      ...PayoutAccountFields\n    }\n  }\n": typeof types.CreatePayoutAccountDocument,
    "\n  query PlatformFeeRate {\n    platform {\n      platformFeeRate\n    }\n  }\n": typeof types.PlatformFeeRateDocument,
    "\n  query HostEarningsOverview($from: DateTime!, $to: DateTime!) {\n    hostEarnings {\n      total\n      currency\n    }\n    earningsByMachine(fromUtc: $from, toUtc: $to) {\n      fromUtc\n      toUtc\n      currency\n      days {\n        dayUtc\n        machineId\n        gpuModel\n        seconds\n        gross\n        fee\n        net\n        downtimeCredits\n        total\n      }\n      totalGross\n      totalFee\n      totalNet\n      total\n    }\n  }\n": typeof types.HostEarningsOverviewDocument,
    "\n  query HostStatementsAndPayouts {\n    statements {\n      id\n      number\n      state\n      periodStartUtc\n      periodEndUtc\n      currency\n      earnings\n      payouts\n    }\n    payouts {\n      id\n      amount\n      currency\n      state\n      failureReason\n      createdAtUtc\n      paidAtUtc\n    }\n  }\n": typeof types.HostStatementsAndPayoutsDocument,
    "\n  fragment StatementFields on Statement {\n    id\n    number\n    state\n    periodStartUtc\n    periodEndUtc\n    currency\n    seconds\n    gross\n    fee\n    net\n    downtimeCredits\n    earnings\n    adjustments\n    payouts\n    openingBalance\n    closingBalance\n    finalizedAtUtc\n    lines {\n      machineId\n      gpuModel\n      meterKind\n      earlierPeriod\n      seconds\n      gross\n      fee\n      net\n      downtimeCredits\n      amount\n      postings\n    }\n  }\n": typeof types.StatementFieldsFragmentDoc,
    "\n  query HostStatement($id: ID!) {\n    statement(id: $id) {\n      ...StatementFields\n    }\n  }\n": typeof types.HostStatementDocument,
    "\n  query HostStatementPreview {\n    statementPreview {\n      ...StatementFields\n    }\n  }\n": typeof types.HostStatementPreviewDocument,
    "\n  fragment ApiKeyFields on ApiKey {\n    id\n    name\n    prefix\n    scopes\n    ownerEmail\n    createdAtUtc\n    lastUsedAtUtc\n    revokedAtUtc\n  }\n": typeof types.ApiKeyFieldsFragmentDoc,
    "\n  query ApiKeysPage($includeRevoked: Boolean!) {\n    apiKeys(includeRevoked: $includeRevoked) {\n      ...ApiKeyFields\n    }\n    me {\n      email\n      scopes\n    }\n  }\n": typeof types.ApiKeysPageDocument,
    "\n  mutation CreateApiKey($input: CreateApiKeyInput!) {\n    createApiKey(input: $input) {\n      apiKey {\n        ...ApiKeyFields\n      }\n      secret\n    }\n  }\n": typeof types.CreateApiKeyDocument,
    "\n  mutation RevokeApiKey($id: ID!) {\n    revokeApiKey(id: $id) {\n      ...ApiKeyFields\n    }\n  }\n": typeof types.RevokeApiKeyDocument,
    "\n  fragment HostReservationFields on Reservation {\n    id\n    gpuCount\n    gpuIndices\n    startsAt\n    endsAt\n    hours\n    hoursLeft\n    pricePerGpuHour\n    amount\n    currency\n    state\n    parentId\n    reason\n    escrow {\n      released\n      fees\n      refunded\n      remaining\n      state\n    }\n  }\n": typeof types.HostReservationFieldsFragmentDoc,
    "\n  query HostMachineReservations($machineId: ID!, $from: DateTime!, $to: DateTime!) {\n    machineCalendar(machineId: $machineId, from: $from, to: $to) {\n      gpuCount\n      from\n      to\n      hours {\n        startsAt\n        freeGpus\n      }\n      bookings {\n        reservationId\n        gpuIndex\n        startsAt\n        endsAt\n      }\n      terms {\n        pricePerGpuHour\n        maxLeadDays\n        minBlockHours\n        currency\n      }\n    }\n    machineReservations(machineId: $machineId) {\n      ...HostReservationFields\n    }\n    myMachines {\n      id\n      reservedEarningsToCome {\n        amount\n        currency\n        blocks\n      }\n    }\n    reservationTerms {\n      feeRate\n      cancellationPenaltyRate\n    }\n  }\n": typeof types.HostMachineReservationsDocument,
    "\n  mutation SetReservedTerms($machineId: ID!, $terms: ReservedTermsInput) {\n    setReservedTerms(machineId: $machineId, terms: $terms) {\n      pricePerGpuHour\n      maxLeadDays\n      minBlockHours\n      currency\n    }\n  }\n": typeof types.SetReservedTermsDocument,
    "\n  mutation CancelReservation($id: ID!, $reason: String!) {\n    cancelReservation(id: $id, reason: $reason) {\n      ...HostReservationFields\n    }\n  }\n": typeof types.CancelReservationDocument,
    "\n  fragment WebhookEndpointFields on WebhookEndpoint {\n    id\n    url\n    description\n    eventTypes\n    enabled\n    disabledReason\n    disabledAt\n    previousSecretUntil\n    createdAt\n    updatedAt\n  }\n": typeof types.WebhookEndpointFieldsFragmentDoc,
    "\n  fragment WebhookDeliveryFields on WebhookDelivery {\n    id\n    webhookId\n    endpointId\n    eventType\n    status\n    attempts\n    nextAttemptAt\n    deliveredAt\n    createdAt\n    payload\n    attemptLog {\n      startedAt\n      statusCode\n      succeeded\n      latencyMs\n      responseHead\n      error\n    }\n  }\n": typeof types.WebhookDeliveryFieldsFragmentDoc,
    "\n  query WebhooksPage {\n    webhookEventTypes {\n      name\n      description\n    }\n    webhookEndpoints {\n      ...WebhookEndpointFields\n    }\n  }\n": typeof types.WebhooksPageDocument,
    "\n  query WebhookDeliveries($endpointId: ID, $limit: Int) {\n    webhookDeliveries(endpointId: $endpointId, limit: $limit) {\n      ...WebhookDeliveryFields\n    }\n  }\n": typeof types.WebhookDeliveriesDocument,
    "\n  mutation CreateWebhookEndpoint($input: CreateWebhookEndpointInput!) {\n    createWebhookEndpoint(input: $input) {\n      secret\n      endpoint {\n        ...WebhookEndpointFields\n      }\n    }\n  }\n": typeof types.CreateWebhookEndpointDocument,
    "\n  mutation UpdateWebhookEndpoint($id: ID!, $input: UpdateWebhookEndpointInput!) {\n    updateWebhookEndpoint(id: $id, input: $input) {\n      ...WebhookEndpointFields\n    }\n  }\n": typeof types.UpdateWebhookEndpointDocument,
    "\n  mutation DeleteWebhookEndpoint($id: ID!) {\n    deleteWebhookEndpoint(id: $id)\n  }\n": typeof types.DeleteWebhookEndpointDocument,
    "\n  mutation RotateWebhookSecret($id: ID!) {\n    rotateWebhookSecret(id: $id) {\n      secret\n      endpoint {\n        ...WebhookEndpointFields\n      }\n    }\n  }\n": typeof types.RotateWebhookSecretDocument,
    "\n  mutation SendWebhookTest($endpointId: ID!) {\n    sendWebhookTest(endpointId: $endpointId) {\n      ...WebhookDeliveryFields\n    }\n  }\n": typeof types.SendWebhookTestDocument,
    "\n  mutation RedeliverWebhook($deliveryId: ID!) {\n    redeliverWebhook(deliveryId: $deliveryId) {\n      ...WebhookDeliveryFields\n    }\n  }\n": typeof types.RedeliverWebhookDocument,
};
const documents: Documents = {
    "\n  mutation BillingLogIn($email: String!, $password: String!) {\n    login(email: $email, password: $password) {\n      token\n      me {\n        email\n        tenantRoles\n      }\n    }\n  }\n": types.BillingLogInDocument,
    "\n  query BillingRunway {\n    runway {\n      balance\n      currency\n      burnRatePerHour\n      runningInstances\n      runwaySeconds\n      low\n      warnBelowSeconds\n    }\n  }\n": types.BillingRunwayDocument,
    "\n  query BillingSpendSeries($from: DateTime!, $to: DateTime!) {\n    usageSeries(bucket: DAY, groupBy: GPU_MODEL, fromUtc: $from, toUtc: $to) {\n      fromUtc\n      toUtc\n      currency\n      totalSpend\n      totalSeconds\n      points {\n        bucketStartUtc\n        key\n        seconds\n        spend\n      }\n    }\n  }\n": types.BillingSpendSeriesDocument,
    "\n  query BillingInstances {\n    instances {\n      id\n      gpuModel\n      gpuCount\n      rental\n      pricePerGpuHour\n      pricePerHourTotal\n      storagePricePerGbMonth\n      currency\n      state\n      statusReason\n      runningAtUtc\n      stoppedAtUtc\n      createdAtUtc\n      costSoFar\n      billedSeconds\n    }\n    usage {\n      id\n      instanceId\n      meterKind\n      startedAtUtc\n      endedAtUtc\n      billedSeconds\n      pricePerHour\n      currency\n    }\n  }\n": types.BillingInstancesDocument,
    "\n  query BillingInvoices {\n    invoices {\n      id\n      number\n      state\n      periodStartUtc\n      periodEndUtc\n      currency\n      subtotal\n      total\n      exactTotal\n      rounding\n      finalizedAtUtc\n      paidAtUtc\n      lines {\n        instanceId\n        meterKind\n        quantity\n        unit\n        unitPrice\n        pricingUnit\n        pricingQuantity\n        earlierPeriod\n        amount\n        exactAmount\n      }\n    }\n  }\n": types.BillingInvoicesDocument,
    "\n  query BillingUsageCsv($invoiceId: ID!) {\n    invoiceUsageCsv(invoiceId: $invoiceId)\n  }\n": types.BillingUsageCsvDocument,
    "\n  query BillingBalanceHistory($first: Int, $after: String) {\n    balanceHistory(first: $first, after: $after) {\n      balance\n      currency\n      nodes {\n        kind\n        description\n        instanceId\n        amount\n        balanceAfter\n        postedAtUtc\n        cursor\n      }\n      pageInfo {\n        endCursor\n        hasNextPage\n      }\n    }\n  }\n": types.BillingBalanceHistoryDocument,
    "\n  query OperatorViewer {\n    me {\n      operator\n      tenantRoles\n    }\n  }\n": types.OperatorViewerDocument,
    "\n  query OperatorMarketplace($from: DateTime!, $to: DateTime!, $nearQuotaPercent: Int) {\n    marketplaceOverview(fromUtc: $from, toUtc: $to, bucket: DAY, nearQuotaPercent: $nearQuotaPercent) {\n      from\n      to\n      volume {\n        currency\n        totalVolume\n        totalHostEarnings\n        totalFees\n        totalFeeAdjustments\n        totalFeeRevenue\n        totalPostings\n        totalSeconds\n        points {\n          bucketStartUtc\n          volume\n          hostEarnings\n          fees\n          feeAdjustments\n          postings\n        }\n      }\n      gpuSupply {\n        atUtc\n        listedGpus\n        onlineGpus\n        rentedGpus\n        rentedListedGpus\n        models {\n          gpuModel\n          listedMachines\n          listedGpus\n          onlineGpus\n          rentedGpus\n          rentedListedGpus\n        }\n      }\n      nearQuota {\n        thresholdPercent\n        currency\n        tenants {\n          tenantId\n          tenantName\n          dimensions {\n            quota\n            limit\n            used\n            percent\n          }\n        }\n      }\n      outOfCredit {\n        currency\n        warnBelowSeconds\n        tenants {\n          tenantId\n          tenantName\n          reasons\n          balance\n          burnPerHour\n          runwaySeconds\n          lowSinceUtc\n          lastChargedAtUtc\n        }\n      }\n    }\n  }\n": types.OperatorMarketplaceDocument,
    "\n  fragment RenterReservationFields on Reservation {\n    id\n    machineId\n    gpuModel\n    gpuCount\n    gpuIndices\n    startsAt\n    endsAt\n    hours\n    hoursLeft\n    pricePerGpuHour\n    amount\n    currency\n    state\n    parentId\n    reason\n    sold {\n      startsAt\n      endsAt\n    }\n    escrow {\n      amount\n      released\n      fees\n      refunded\n      penalty\n      remaining\n      state\n    }\n  }\n": types.RenterReservationFieldsFragmentDoc,
    "\n  fragment ResaleListingFields on ResaleListing {\n    id\n    reservationId\n    machineId\n    gpuModel\n    gpuCount\n    startsAt\n    endsAt\n    hours\n    pricePerGpuHour\n    amount\n    currency\n    state\n    createdAt\n  }\n": types.ResaleListingFieldsFragmentDoc,
    "\n  query BillingReservations($from: DateTime!) {\n    reservations {\n      ...RenterReservationFields\n    }\n    myListings {\n      ...ResaleListingFields\n    }\n    resaleListings(filter: { from: $from }) {\n      ...ResaleListingFields\n    }\n    reservationTerms {\n      resaleFeeRate\n      cancellationPenaltyRate\n    }\n  }\n": types.BillingReservationsDocument,
    "\n  mutation ListReservationHours($input: ListReservationHoursInput!) {\n    listReservationHours(input: $input) {\n      ...ResaleListingFields\n    }\n  }\n": types.ListReservationHoursDocument,
    "\n  mutation WithdrawListing($id: ID!) {\n    withdrawListing(id: $id) {\n      ...ResaleListingFields\n    }\n  }\n": types.WithdrawListingDocument,
    "\n  mutation BuyReservationHours($input: BuyReservationHoursInput!) {\n    buyReservationHours(input: $input) {\n      ...RenterReservationFields\n    }\n  }\n": types.BuyReservationHoursDocument,
    "\n  query TopUpPlatform {\n    platform {\n      currency\n      stripePublishableKey\n    }\n    me {\n      tenantRoles\n    }\n  }\n": types.TopUpPlatformDocument,
    "\n  query TopUpState {\n    balance {\n      amount\n      currency\n    }\n    topUps {\n      id\n      amount\n      currency\n      status\n      createdAtUtc\n      succeededAtUtc\n    }\n  }\n": types.TopUpStateDocument,
    "\n  mutation TopUpCreate($amount: Decimal!, $idempotencyKey: String) {\n    createTopUp(amount: $amount, idempotencyKey: $idempotencyKey) {\n      id\n      amount\n      currency\n      status\n      clientSecret\n      paymentIntentId\n      createdAtUtc\n    }\n  }\n": types.TopUpCreateDocument,
    "\n  mutation SignUp($input: SignUpInput!) {\n    signUp(input: $input) {\n      token\n      expiresAtUtc\n      me {\n        ...MeFields\n      }\n    }\n  }\n": types.SignUpDocument,
    "\n  mutation LogIn($email: String!, $password: String!) {\n    login(email: $email, password: $password) {\n      token\n      expiresAtUtc\n      me {\n        ...MeFields\n      }\n    }\n  }\n": types.LogInDocument,
    "\n  fragment MeFields on Me {\n    email\n    tenantRoles\n  }\n": types.MeFieldsFragmentDoc,
    "\n  query GpuCatalog {\n    gpuModels {\n      name\n      vramGib\n      architecture\n    }\n  }\n": types.GpuCatalogDocument,
    "\n  fragment MachineFields on Machine {\n    id\n    name\n    gpuModel\n    gpuCount\n    vramGib\n    country\n    pricePerGpuHour\n    currency\n    listed\n    online\n    lastHeartbeatAtUtc\n    gpusAllocated\n    reliability\n    verified\n    createdAtUtc\n  }\n": types.MachineFieldsFragmentDoc,
    "\n  query MyMachines {\n    myMachines {\n      ...MachineFields\n    }\n  }\n": types.MyMachinesDocument,
    "\n  mutation RegisterMachine($input: RegisterMachineInput!) {\n    registerMachine(input: $input) {\n      machine {\n        ...MachineFields\n      }\n      agentToken\n    }\n  }\n": types.RegisterMachineDocument,
    "\n  mutation SetPrice($machineId: ID!, $price: Decimal!) {\n    setMachinePricing(machineId: $machineId, pricePerGpuHour: $price) {\n      ...MachineFields\n    }\n  }\n": types.SetPriceDocument,
    "\n  mutation ListMachine($machineId: ID!) {\n    listMachine(machineId: $machineId) {\n      ...MachineFields\n    }\n  }\n": types.ListMachineDocument,
    "\n  mutation UnlistMachine($machineId: ID!) {\n    unlistMachine(machineId: $machineId) {\n      ...MachineFields\n    }\n  }\n": types.UnlistMachineDocument,
    "\n  query HeartbeatGaps($machineId: ID!) {\n    heartbeatGaps(machineId: $machineId) {\n      startedAtUtc\n      endedAtUtc\n      seconds\n    }\n  }\n": types.HeartbeatGapsDocument,
    "\n  fragment MachineGpuFields on MachineGpu {\n    index\n    mode\n    rentedWhole\n    layout {\n      profile\n      start\n    }\n    slices {\n      profile\n      start\n      size\n      instanceId\n    }\n  }\n": types.MachineGpuFieldsFragmentDoc,
    "\n  query HostMachineGpus {\n    myMachines {\n      id\n      gpus {\n        ...MachineGpuFields\n      }\n    }\n    gpuModels {\n      name\n      migProfiles {\n        name\n        memorySlices\n        memoryGib\n      }\n    }\n  }\n": types.HostMachineGpusDocument,
    "\n  mutation SetGpuMode($input: SetGpuModeInput!) {\n    setGpuMode(input: $input) {\n      ...MachineGpuFields\n    }\n  }\n": types.SetGpuModeDocument,
    "\n  fragment HostProfileFields on HostProfile {\n    legalName\n    country\n    payoutCurrency\n    verification\n    verificationReason\n    updatedAtUtc\n  }\n": types.HostProfileFieldsFragmentDoc,
    "\n  query MyHostProfile {\n    hostProfile {\n      ...HostProfileFields\n    }\n  }\n": types.MyHostProfileDocument,
    "\n  mutation UpdateHostProfile($input: HostProfileInput!) {\n    updateHostProfile(input: $input) {\n      ...HostProfileFields\n    }\n  }\n": types.UpdateHostProfileDocument,
    "\n  fragment PayoutAccountFields on PayoutAccount {\n    stripeAccountId\n    country\n    email\n    transfersStatus\n    payoutsEnabled\n    detailsSubmitted\n    createdAtUtc\n  }\n": types.PayoutAccountFieldsFragmentDoc,
    "\n  query MyPayoutAccount {\n    payoutAccount {\n      ...PayoutAccountFields\n    }\n  }\n": types.MyPayoutAccountDocument,
    "\n  mutation CreatePayoutOnboardingLink {\n    createPayoutOnboardingLink {\n      url\n      expiresAtUtc\n    }\n  }\n": types.CreatePayoutOnboardingLinkDocument,
    "\n  mutation CreatePayoutAccount($country: String!, $email: String) {\n    createPayoutAccount(country: $country, email: $email) {\n      ...PayoutAccountFields\n    }\n  }\n": types.CreatePayoutAccountDocument,
    "\n  query PlatformFeeRate {\n    platform {\n      platformFeeRate\n    }\n  }\n": types.PlatformFeeRateDocument,
    "\n  query HostEarningsOverview($from: DateTime!, $to: DateTime!) {\n    hostEarnings {\n      total\n      currency\n    }\n    earningsByMachine(fromUtc: $from, toUtc: $to) {\n      fromUtc\n      toUtc\n      currency\n      days {\n        dayUtc\n        machineId\n        gpuModel\n        seconds\n        gross\n        fee\n        net\n        downtimeCredits\n        total\n      }\n      totalGross\n      totalFee\n      totalNet\n      total\n    }\n  }\n": types.HostEarningsOverviewDocument,
    "\n  query HostStatementsAndPayouts {\n    statements {\n      id\n      number\n      state\n      periodStartUtc\n      periodEndUtc\n      currency\n      earnings\n      payouts\n    }\n    payouts {\n      id\n      amount\n      currency\n      state\n      failureReason\n      createdAtUtc\n      paidAtUtc\n    }\n  }\n": types.HostStatementsAndPayoutsDocument,
    "\n  fragment StatementFields on Statement {\n    id\n    number\n    state\n    periodStartUtc\n    periodEndUtc\n    currency\n    seconds\n    gross\n    fee\n    net\n    downtimeCredits\n    earnings\n    adjustments\n    payouts\n    openingBalance\n    closingBalance\n    finalizedAtUtc\n    lines {\n      machineId\n      gpuModel\n      meterKind\n      earlierPeriod\n      seconds\n      gross\n      fee\n      net\n      downtimeCredits\n      amount\n      postings\n    }\n  }\n": types.StatementFieldsFragmentDoc,
    "\n  query HostStatement($id: ID!) {\n    statement(id: $id) {\n      ...StatementFields\n    }\n  }\n": types.HostStatementDocument,
    "\n  query HostStatementPreview {\n    statementPreview {\n      ...StatementFields\n    }\n  }\n": types.HostStatementPreviewDocument,
    "\n  fragment ApiKeyFields on ApiKey {\n    id\n    name\n    prefix\n    scopes\n    ownerEmail\n    createdAtUtc\n    lastUsedAtUtc\n    revokedAtUtc\n  }\n": types.ApiKeyFieldsFragmentDoc,
    "\n  query ApiKeysPage($includeRevoked: Boolean!) {\n    apiKeys(includeRevoked: $includeRevoked) {\n      ...ApiKeyFields\n    }\n    me {\n      email\n      scopes\n    }\n  }\n": types.ApiKeysPageDocument,
    "\n  mutation CreateApiKey($input: CreateApiKeyInput!) {\n    createApiKey(input: $input) {\n      apiKey {\n        ...ApiKeyFields\n      }\n      secret\n    }\n  }\n": types.CreateApiKeyDocument,
    "\n  mutation RevokeApiKey($id: ID!) {\n    revokeApiKey(id: $id) {\n      ...ApiKeyFields\n    }\n  }\n": types.RevokeApiKeyDocument,
    "\n  fragment HostReservationFields on Reservation {\n    id\n    gpuCount\n    gpuIndices\n    startsAt\n    endsAt\n    hours\n    hoursLeft\n    pricePerGpuHour\n    amount\n    currency\n    state\n    parentId\n    reason\n    escrow {\n      released\n      fees\n      refunded\n      remaining\n      state\n    }\n  }\n": types.HostReservationFieldsFragmentDoc,
    "\n  query HostMachineReservations($machineId: ID!, $from: DateTime!, $to: DateTime!) {\n    machineCalendar(machineId: $machineId, from: $from, to: $to) {\n      gpuCount\n      from\n      to\n      hours {\n        startsAt\n        freeGpus\n      }\n      bookings {\n        reservationId\n        gpuIndex\n        startsAt\n        endsAt\n      }\n      terms {\n        pricePerGpuHour\n        maxLeadDays\n        minBlockHours\n        currency\n      }\n    }\n    machineReservations(machineId: $machineId) {\n      ...HostReservationFields\n    }\n    myMachines {\n      id\n      reservedEarningsToCome {\n        amount\n        currency\n        blocks\n      }\n    }\n    reservationTerms {\n      feeRate\n      cancellationPenaltyRate\n    }\n  }\n": types.HostMachineReservationsDocument,
    "\n  mutation SetReservedTerms($machineId: ID!, $terms: ReservedTermsInput) {\n    setReservedTerms(machineId: $machineId, terms: $terms) {\n      pricePerGpuHour\n      maxLeadDays\n      minBlockHours\n      currency\n    }\n  }\n": types.SetReservedTermsDocument,
    "\n  mutation CancelReservation($id: ID!, $reason: String!) {\n    cancelReservation(id: $id, reason: $reason) {\n      ...HostReservationFields\n    }\n  }\n": types.CancelReservationDocument,
    "\n  fragment WebhookEndpointFields on WebhookEndpoint {\n    id\n    url\n    description\n    eventTypes\n    enabled\n    disabledReason\n    disabledAt\n    previousSecretUntil\n    createdAt\n    updatedAt\n  }\n": types.WebhookEndpointFieldsFragmentDoc,
    "\n  fragment WebhookDeliveryFields on WebhookDelivery {\n    id\n    webhookId\n    endpointId\n    eventType\n    status\n    attempts\n    nextAttemptAt\n    deliveredAt\n    createdAt\n    payload\n    attemptLog {\n      startedAt\n      statusCode\n      succeeded\n      latencyMs\n      responseHead\n      error\n    }\n  }\n": types.WebhookDeliveryFieldsFragmentDoc,
    "\n  query WebhooksPage {\n    webhookEventTypes {\n      name\n      description\n    }\n    webhookEndpoints {\n      ...WebhookEndpointFields\n    }\n  }\n": types.WebhooksPageDocument,
    "\n  query WebhookDeliveries($endpointId: ID, $limit: Int) {\n    webhookDeliveries(endpointId: $endpointId, limit: $limit) {\n      ...WebhookDeliveryFields\n    }\n  }\n": types.WebhookDeliveriesDocument,
    "\n  mutation CreateWebhookEndpoint($input: CreateWebhookEndpointInput!) {\n    createWebhookEndpoint(input: $input) {\n      secret\n      endpoint {\n        ...WebhookEndpointFields\n      }\n    }\n  }\n": types.CreateWebhookEndpointDocument,
    "\n  mutation UpdateWebhookEndpoint($id: ID!, $input: UpdateWebhookEndpointInput!) {\n    updateWebhookEndpoint(id: $id, input: $input) {\n      ...WebhookEndpointFields\n    }\n  }\n": types.UpdateWebhookEndpointDocument,
    "\n  mutation DeleteWebhookEndpoint($id: ID!) {\n    deleteWebhookEndpoint(id: $id)\n  }\n": types.DeleteWebhookEndpointDocument,
    "\n  mutation RotateWebhookSecret($id: ID!) {\n    rotateWebhookSecret(id: $id) {\n      secret\n      endpoint {\n        ...WebhookEndpointFields\n      }\n    }\n  }\n": types.RotateWebhookSecretDocument,
    "\n  mutation SendWebhookTest($endpointId: ID!) {\n    sendWebhookTest(endpointId: $endpointId) {\n      ...WebhookDeliveryFields\n    }\n  }\n": types.SendWebhookTestDocument,
    "\n  mutation RedeliverWebhook($deliveryId: ID!) {\n    redeliverWebhook(deliveryId: $deliveryId) {\n      ...WebhookDeliveryFields\n    }\n  }\n": types.RedeliverWebhookDocument,
};

/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation BillingLogIn($email: String!, $password: String!) {\n    login(email: $email, password: $password) {\n      token\n      me {\n        email\n        tenantRoles\n      }\n    }\n  }\n"): typeof import('./graphql').BillingLogInDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query BillingRunway {\n    runway {\n      balance\n      currency\n      burnRatePerHour\n      runningInstances\n      runwaySeconds\n      low\n      warnBelowSeconds\n    }\n  }\n"): typeof import('./graphql').BillingRunwayDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query BillingSpendSeries($from: DateTime!, $to: DateTime!) {\n    usageSeries(bucket: DAY, groupBy: GPU_MODEL, fromUtc: $from, toUtc: $to) {\n      fromUtc\n      toUtc\n      currency\n      totalSpend\n      totalSeconds\n      points {\n        bucketStartUtc\n        key\n        seconds\n        spend\n      }\n    }\n  }\n"): typeof import('./graphql').BillingSpendSeriesDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query BillingInstances {\n    instances {\n      id\n      gpuModel\n      gpuCount\n      rental\n      pricePerGpuHour\n      pricePerHourTotal\n      storagePricePerGbMonth\n      currency\n      state\n      statusReason\n      runningAtUtc\n      stoppedAtUtc\n      createdAtUtc\n      costSoFar\n      billedSeconds\n    }\n    usage {\n      id\n      instanceId\n      meterKind\n      startedAtUtc\n      endedAtUtc\n      billedSeconds\n      pricePerHour\n      currency\n    }\n  }\n"): typeof import('./graphql').BillingInstancesDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query BillingInvoices {\n    invoices {\n      id\n      number\n      state\n      periodStartUtc\n      periodEndUtc\n      currency\n      subtotal\n      total\n      exactTotal\n      rounding\n      finalizedAtUtc\n      paidAtUtc\n      lines {\n        instanceId\n        meterKind\n        quantity\n        unit\n        unitPrice\n        pricingUnit\n        pricingQuantity\n        earlierPeriod\n        amount\n        exactAmount\n      }\n    }\n  }\n"): typeof import('./graphql').BillingInvoicesDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query BillingUsageCsv($invoiceId: ID!) {\n    invoiceUsageCsv(invoiceId: $invoiceId)\n  }\n"): typeof import('./graphql').BillingUsageCsvDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query BillingBalanceHistory($first: Int, $after: String) {\n    balanceHistory(first: $first, after: $after) {\n      balance\n      currency\n      nodes {\n        kind\n        description\n        instanceId\n        amount\n        balanceAfter\n        postedAtUtc\n        cursor\n      }\n      pageInfo {\n        endCursor\n        hasNextPage\n      }\n    }\n  }\n"): typeof import('./graphql').BillingBalanceHistoryDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query OperatorViewer {\n    me {\n      operator\n      tenantRoles\n    }\n  }\n"): typeof import('./graphql').OperatorViewerDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query OperatorMarketplace($from: DateTime!, $to: DateTime!, $nearQuotaPercent: Int) {\n    marketplaceOverview(fromUtc: $from, toUtc: $to, bucket: DAY, nearQuotaPercent: $nearQuotaPercent) {\n      from\n      to\n      volume {\n        currency\n        totalVolume\n        totalHostEarnings\n        totalFees\n        totalFeeAdjustments\n        totalFeeRevenue\n        totalPostings\n        totalSeconds\n        points {\n          bucketStartUtc\n          volume\n          hostEarnings\n          fees\n          feeAdjustments\n          postings\n        }\n      }\n      gpuSupply {\n        atUtc\n        listedGpus\n        onlineGpus\n        rentedGpus\n        rentedListedGpus\n        models {\n          gpuModel\n          listedMachines\n          listedGpus\n          onlineGpus\n          rentedGpus\n          rentedListedGpus\n        }\n      }\n      nearQuota {\n        thresholdPercent\n        currency\n        tenants {\n          tenantId\n          tenantName\n          dimensions {\n            quota\n            limit\n            used\n            percent\n          }\n        }\n      }\n      outOfCredit {\n        currency\n        warnBelowSeconds\n        tenants {\n          tenantId\n          tenantName\n          reasons\n          balance\n          burnPerHour\n          runwaySeconds\n          lowSinceUtc\n          lastChargedAtUtc\n        }\n      }\n    }\n  }\n"): typeof import('./graphql').OperatorMarketplaceDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment RenterReservationFields on Reservation {\n    id\n    machineId\n    gpuModel\n    gpuCount\n    gpuIndices\n    startsAt\n    endsAt\n    hours\n    hoursLeft\n    pricePerGpuHour\n    amount\n    currency\n    state\n    parentId\n    reason\n    sold {\n      startsAt\n      endsAt\n    }\n    escrow {\n      amount\n      released\n      fees\n      refunded\n      penalty\n      remaining\n      state\n    }\n  }\n"): typeof import('./graphql').RenterReservationFieldsFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment ResaleListingFields on ResaleListing {\n    id\n    reservationId\n    machineId\n    gpuModel\n    gpuCount\n    startsAt\n    endsAt\n    hours\n    pricePerGpuHour\n    amount\n    currency\n    state\n    createdAt\n  }\n"): typeof import('./graphql').ResaleListingFieldsFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query BillingReservations($from: DateTime!) {\n    reservations {\n      ...RenterReservationFields\n    }\n    myListings {\n      ...ResaleListingFields\n    }\n    resaleListings(filter: { from: $from }) {\n      ...ResaleListingFields\n    }\n    reservationTerms {\n      resaleFeeRate\n      cancellationPenaltyRate\n    }\n  }\n"): typeof import('./graphql').BillingReservationsDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation ListReservationHours($input: ListReservationHoursInput!) {\n    listReservationHours(input: $input) {\n      ...ResaleListingFields\n    }\n  }\n"): typeof import('./graphql').ListReservationHoursDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation WithdrawListing($id: ID!) {\n    withdrawListing(id: $id) {\n      ...ResaleListingFields\n    }\n  }\n"): typeof import('./graphql').WithdrawListingDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation BuyReservationHours($input: BuyReservationHoursInput!) {\n    buyReservationHours(input: $input) {\n      ...RenterReservationFields\n    }\n  }\n"): typeof import('./graphql').BuyReservationHoursDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query TopUpPlatform {\n    platform {\n      currency\n      stripePublishableKey\n    }\n    me {\n      tenantRoles\n    }\n  }\n"): typeof import('./graphql').TopUpPlatformDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query TopUpState {\n    balance {\n      amount\n      currency\n    }\n    topUps {\n      id\n      amount\n      currency\n      status\n      createdAtUtc\n      succeededAtUtc\n    }\n  }\n"): typeof import('./graphql').TopUpStateDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation TopUpCreate($amount: Decimal!, $idempotencyKey: String) {\n    createTopUp(amount: $amount, idempotencyKey: $idempotencyKey) {\n      id\n      amount\n      currency\n      status\n      clientSecret\n      paymentIntentId\n      createdAtUtc\n    }\n  }\n"): typeof import('./graphql').TopUpCreateDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation SignUp($input: SignUpInput!) {\n    signUp(input: $input) {\n      token\n      expiresAtUtc\n      me {\n        ...MeFields\n      }\n    }\n  }\n"): typeof import('./graphql').SignUpDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation LogIn($email: String!, $password: String!) {\n    login(email: $email, password: $password) {\n      token\n      expiresAtUtc\n      me {\n        ...MeFields\n      }\n    }\n  }\n"): typeof import('./graphql').LogInDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment MeFields on Me {\n    email\n    tenantRoles\n  }\n"): typeof import('./graphql').MeFieldsFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query GpuCatalog {\n    gpuModels {\n      name\n      vramGib\n      architecture\n    }\n  }\n"): typeof import('./graphql').GpuCatalogDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment MachineFields on Machine {\n    id\n    name\n    gpuModel\n    gpuCount\n    vramGib\n    country\n    pricePerGpuHour\n    currency\n    listed\n    online\n    lastHeartbeatAtUtc\n    gpusAllocated\n    reliability\n    verified\n    createdAtUtc\n  }\n"): typeof import('./graphql').MachineFieldsFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query MyMachines {\n    myMachines {\n      ...MachineFields\n    }\n  }\n"): typeof import('./graphql').MyMachinesDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation RegisterMachine($input: RegisterMachineInput!) {\n    registerMachine(input: $input) {\n      machine {\n        ...MachineFields\n      }\n      agentToken\n    }\n  }\n"): typeof import('./graphql').RegisterMachineDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation SetPrice($machineId: ID!, $price: Decimal!) {\n    setMachinePricing(machineId: $machineId, pricePerGpuHour: $price) {\n      ...MachineFields\n    }\n  }\n"): typeof import('./graphql').SetPriceDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation ListMachine($machineId: ID!) {\n    listMachine(machineId: $machineId) {\n      ...MachineFields\n    }\n  }\n"): typeof import('./graphql').ListMachineDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation UnlistMachine($machineId: ID!) {\n    unlistMachine(machineId: $machineId) {\n      ...MachineFields\n    }\n  }\n"): typeof import('./graphql').UnlistMachineDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query HeartbeatGaps($machineId: ID!) {\n    heartbeatGaps(machineId: $machineId) {\n      startedAtUtc\n      endedAtUtc\n      seconds\n    }\n  }\n"): typeof import('./graphql').HeartbeatGapsDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment MachineGpuFields on MachineGpu {\n    index\n    mode\n    rentedWhole\n    layout {\n      profile\n      start\n    }\n    slices {\n      profile\n      start\n      size\n      instanceId\n    }\n  }\n"): typeof import('./graphql').MachineGpuFieldsFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query HostMachineGpus {\n    myMachines {\n      id\n      gpus {\n        ...MachineGpuFields\n      }\n    }\n    gpuModels {\n      name\n      migProfiles {\n        name\n        memorySlices\n        memoryGib\n      }\n    }\n  }\n"): typeof import('./graphql').HostMachineGpusDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation SetGpuMode($input: SetGpuModeInput!) {\n    setGpuMode(input: $input) {\n      ...MachineGpuFields\n    }\n  }\n"): typeof import('./graphql').SetGpuModeDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment HostProfileFields on HostProfile {\n    legalName\n    country\n    payoutCurrency\n    verification\n    verificationReason\n    updatedAtUtc\n  }\n"): typeof import('./graphql').HostProfileFieldsFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query MyHostProfile {\n    hostProfile {\n      ...HostProfileFields\n    }\n  }\n"): typeof import('./graphql').MyHostProfileDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation UpdateHostProfile($input: HostProfileInput!) {\n    updateHostProfile(input: $input) {\n      ...HostProfileFields\n    }\n  }\n"): typeof import('./graphql').UpdateHostProfileDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment PayoutAccountFields on PayoutAccount {\n    stripeAccountId\n    country\n    email\n    transfersStatus\n    payoutsEnabled\n    detailsSubmitted\n    createdAtUtc\n  }\n"): typeof import('./graphql').PayoutAccountFieldsFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query MyPayoutAccount {\n    payoutAccount {\n      ...PayoutAccountFields\n    }\n  }\n"): typeof import('./graphql').MyPayoutAccountDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation CreatePayoutOnboardingLink {\n    createPayoutOnboardingLink {\n      url\n      expiresAtUtc\n    }\n  }\n"): typeof import('./graphql').CreatePayoutOnboardingLinkDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation CreatePayoutAccount($country: String!, $email: String) {\n    createPayoutAccount(country: $country, email: $email) {\n      ...PayoutAccountFields\n    }\n  }\n"): typeof import('./graphql').CreatePayoutAccountDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query PlatformFeeRate {\n    platform {\n      platformFeeRate\n    }\n  }\n"): typeof import('./graphql').PlatformFeeRateDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query HostEarningsOverview($from: DateTime!, $to: DateTime!) {\n    hostEarnings {\n      total\n      currency\n    }\n    earningsByMachine(fromUtc: $from, toUtc: $to) {\n      fromUtc\n      toUtc\n      currency\n      days {\n        dayUtc\n        machineId\n        gpuModel\n        seconds\n        gross\n        fee\n        net\n        downtimeCredits\n        total\n      }\n      totalGross\n      totalFee\n      totalNet\n      total\n    }\n  }\n"): typeof import('./graphql').HostEarningsOverviewDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query HostStatementsAndPayouts {\n    statements {\n      id\n      number\n      state\n      periodStartUtc\n      periodEndUtc\n      currency\n      earnings\n      payouts\n    }\n    payouts {\n      id\n      amount\n      currency\n      state\n      failureReason\n      createdAtUtc\n      paidAtUtc\n    }\n  }\n"): typeof import('./graphql').HostStatementsAndPayoutsDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment StatementFields on Statement {\n    id\n    number\n    state\n    periodStartUtc\n    periodEndUtc\n    currency\n    seconds\n    gross\n    fee\n    net\n    downtimeCredits\n    earnings\n    adjustments\n    payouts\n    openingBalance\n    closingBalance\n    finalizedAtUtc\n    lines {\n      machineId\n      gpuModel\n      meterKind\n      earlierPeriod\n      seconds\n      gross\n      fee\n      net\n      downtimeCredits\n      amount\n      postings\n    }\n  }\n"): typeof import('./graphql').StatementFieldsFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query HostStatement($id: ID!) {\n    statement(id: $id) {\n      ...StatementFields\n    }\n  }\n"): typeof import('./graphql').HostStatementDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query HostStatementPreview {\n    statementPreview {\n      ...StatementFields\n    }\n  }\n"): typeof import('./graphql').HostStatementPreviewDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment ApiKeyFields on ApiKey {\n    id\n    name\n    prefix\n    scopes\n    ownerEmail\n    createdAtUtc\n    lastUsedAtUtc\n    revokedAtUtc\n  }\n"): typeof import('./graphql').ApiKeyFieldsFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query ApiKeysPage($includeRevoked: Boolean!) {\n    apiKeys(includeRevoked: $includeRevoked) {\n      ...ApiKeyFields\n    }\n    me {\n      email\n      scopes\n    }\n  }\n"): typeof import('./graphql').ApiKeysPageDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation CreateApiKey($input: CreateApiKeyInput!) {\n    createApiKey(input: $input) {\n      apiKey {\n        ...ApiKeyFields\n      }\n      secret\n    }\n  }\n"): typeof import('./graphql').CreateApiKeyDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation RevokeApiKey($id: ID!) {\n    revokeApiKey(id: $id) {\n      ...ApiKeyFields\n    }\n  }\n"): typeof import('./graphql').RevokeApiKeyDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment HostReservationFields on Reservation {\n    id\n    gpuCount\n    gpuIndices\n    startsAt\n    endsAt\n    hours\n    hoursLeft\n    pricePerGpuHour\n    amount\n    currency\n    state\n    parentId\n    reason\n    escrow {\n      released\n      fees\n      refunded\n      remaining\n      state\n    }\n  }\n"): typeof import('./graphql').HostReservationFieldsFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query HostMachineReservations($machineId: ID!, $from: DateTime!, $to: DateTime!) {\n    machineCalendar(machineId: $machineId, from: $from, to: $to) {\n      gpuCount\n      from\n      to\n      hours {\n        startsAt\n        freeGpus\n      }\n      bookings {\n        reservationId\n        gpuIndex\n        startsAt\n        endsAt\n      }\n      terms {\n        pricePerGpuHour\n        maxLeadDays\n        minBlockHours\n        currency\n      }\n    }\n    machineReservations(machineId: $machineId) {\n      ...HostReservationFields\n    }\n    myMachines {\n      id\n      reservedEarningsToCome {\n        amount\n        currency\n        blocks\n      }\n    }\n    reservationTerms {\n      feeRate\n      cancellationPenaltyRate\n    }\n  }\n"): typeof import('./graphql').HostMachineReservationsDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation SetReservedTerms($machineId: ID!, $terms: ReservedTermsInput) {\n    setReservedTerms(machineId: $machineId, terms: $terms) {\n      pricePerGpuHour\n      maxLeadDays\n      minBlockHours\n      currency\n    }\n  }\n"): typeof import('./graphql').SetReservedTermsDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation CancelReservation($id: ID!, $reason: String!) {\n    cancelReservation(id: $id, reason: $reason) {\n      ...HostReservationFields\n    }\n  }\n"): typeof import('./graphql').CancelReservationDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment WebhookEndpointFields on WebhookEndpoint {\n    id\n    url\n    description\n    eventTypes\n    enabled\n    disabledReason\n    disabledAt\n    previousSecretUntil\n    createdAt\n    updatedAt\n  }\n"): typeof import('./graphql').WebhookEndpointFieldsFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment WebhookDeliveryFields on WebhookDelivery {\n    id\n    webhookId\n    endpointId\n    eventType\n    status\n    attempts\n    nextAttemptAt\n    deliveredAt\n    createdAt\n    payload\n    attemptLog {\n      startedAt\n      statusCode\n      succeeded\n      latencyMs\n      responseHead\n      error\n    }\n  }\n"): typeof import('./graphql').WebhookDeliveryFieldsFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query WebhooksPage {\n    webhookEventTypes {\n      name\n      description\n    }\n    webhookEndpoints {\n      ...WebhookEndpointFields\n    }\n  }\n"): typeof import('./graphql').WebhooksPageDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query WebhookDeliveries($endpointId: ID, $limit: Int) {\n    webhookDeliveries(endpointId: $endpointId, limit: $limit) {\n      ...WebhookDeliveryFields\n    }\n  }\n"): typeof import('./graphql').WebhookDeliveriesDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation CreateWebhookEndpoint($input: CreateWebhookEndpointInput!) {\n    createWebhookEndpoint(input: $input) {\n      secret\n      endpoint {\n        ...WebhookEndpointFields\n      }\n    }\n  }\n"): typeof import('./graphql').CreateWebhookEndpointDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation UpdateWebhookEndpoint($id: ID!, $input: UpdateWebhookEndpointInput!) {\n    updateWebhookEndpoint(id: $id, input: $input) {\n      ...WebhookEndpointFields\n    }\n  }\n"): typeof import('./graphql').UpdateWebhookEndpointDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation DeleteWebhookEndpoint($id: ID!) {\n    deleteWebhookEndpoint(id: $id)\n  }\n"): typeof import('./graphql').DeleteWebhookEndpointDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation RotateWebhookSecret($id: ID!) {\n    rotateWebhookSecret(id: $id) {\n      secret\n      endpoint {\n        ...WebhookEndpointFields\n      }\n    }\n  }\n"): typeof import('./graphql').RotateWebhookSecretDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation SendWebhookTest($endpointId: ID!) {\n    sendWebhookTest(endpointId: $endpointId) {\n      ...WebhookDeliveryFields\n    }\n  }\n"): typeof import('./graphql').SendWebhookTestDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation RedeliverWebhook($deliveryId: ID!) {\n    redeliverWebhook(deliveryId: $deliveryId) {\n      ...WebhookDeliveryFields\n    }\n  }\n"): typeof import('./graphql').RedeliverWebhookDocument;


export function graphql(source: string) {
  return (documents as any)[source] ?? {};
}

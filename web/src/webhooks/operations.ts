// The webhooks page's operations (Webhooks.tsx, shown in the host portal and
// on the billing page), typed by `npm run codegen` from
// api-specs/graphql/schema.graphql.
import { graphql } from '../gql';

export const WebhookEndpointFields = graphql(`
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
`);

export const WebhookDeliveryFields = graphql(`
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
`);

/** The event types an endpoint can subscribe to, and the tenant's endpoints. */
export const WebhooksPage = graphql(`
  query WebhooksPage {
    webhookEventTypes {
      name
      description
    }
    webhookEndpoints {
      ...WebhookEndpointFields
    }
  }
`);

/** The delivery log, newest first: one endpoint's, or every endpoint's. */
export const WebhookDeliveries = graphql(`
  query WebhookDeliveries($endpointId: ID, $limit: Int) {
    webhookDeliveries(endpointId: $endpointId, limit: $limit) {
      ...WebhookDeliveryFields
    }
  }
`);

export const CreateWebhookEndpoint = graphql(`
  mutation CreateWebhookEndpoint($input: CreateWebhookEndpointInput!) {
    createWebhookEndpoint(input: $input) {
      secret
      endpoint {
        ...WebhookEndpointFields
      }
    }
  }
`);

export const UpdateWebhookEndpoint = graphql(`
  mutation UpdateWebhookEndpoint($id: ID!, $input: UpdateWebhookEndpointInput!) {
    updateWebhookEndpoint(id: $id, input: $input) {
      ...WebhookEndpointFields
    }
  }
`);

export const DeleteWebhookEndpoint = graphql(`
  mutation DeleteWebhookEndpoint($id: ID!) {
    deleteWebhookEndpoint(id: $id)
  }
`);

export const RotateWebhookSecret = graphql(`
  mutation RotateWebhookSecret($id: ID!) {
    rotateWebhookSecret(id: $id) {
      secret
      endpoint {
        ...WebhookEndpointFields
      }
    }
  }
`);

export const SendWebhookTest = graphql(`
  mutation SendWebhookTest($endpointId: ID!) {
    sendWebhookTest(endpointId: $endpointId) {
      ...WebhookDeliveryFields
    }
  }
`);

export const RedeliverWebhook = graphql(`
  mutation RedeliverWebhook($deliveryId: ID!) {
    redeliverWebhook(deliveryId: $deliveryId) {
      ...WebhookDeliveryFields
    }
  }
`);

// The API keys page's operations (ApiKeys.tsx), typed by `npm run codegen`
// from api-specs/graphql/schema.graphql.
import { graphql } from '../gql';

export const ApiKeyFields = graphql(`
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
`);

/** The keys the caller may manage, and the scopes it may give a new key. */
export const ApiKeysPage = graphql(`
  query ApiKeysPage($includeRevoked: Boolean!) {
    apiKeys(includeRevoked: $includeRevoked) {
      ...ApiKeyFields
    }
    me {
      email
      scopes
    }
  }
`);

export const CreateApiKey = graphql(`
  mutation CreateApiKey($input: CreateApiKeyInput!) {
    createApiKey(input: $input) {
      apiKey {
        ...ApiKeyFields
      }
      secret
    }
  }
`);

export const RevokeApiKey = graphql(`
  mutation RevokeApiKey($id: ID!) {
    revokeApiKey(id: $id) {
      ...ApiKeyFields
    }
  }
`);

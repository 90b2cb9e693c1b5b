// GraphQL Code Generator: typed operations from the public schema.
// `npm run codegen` writes src/gql/ (committed); `npm run codegen:check`
// generates into a temporary directory and fails when src/gql/ differs, so
// a schema change that breaks an operation fails the build.
import type { CodegenConfig } from '@graphql-codegen/cli';

const out = process.env.CODEGEN_OUT ?? 'src/gql/';

const config: CodegenConfig = {
  schema: '../api-specs/graphql/schema.graphql',
  documents: ['src/**/*.{ts,tsx}', '!src/gql/**/*'],
  ignoreNoDocuments: false,
  generates: {
    [out]: {
      preset: 'client',
      presetConfig: { fragmentMasking: false },
      config: {
        documentMode: 'string',
        enumsAsTypes: true,
        useTypeImports: true,
        // DateTime is RFC 3339 text (issue 19's typed instants start with webhooks).
        scalars: { Decimal: 'string', DateTime: 'string' },
        strictScalars: true,
      },
    },
  },
  hooks: {},
};

export default config;

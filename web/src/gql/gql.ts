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
    "\n  mutation SignUp($input: SignUpInput!) {\n    signUp(input: $input) {\n      token\n      expiresAt\n      me {\n        ...MeFields\n      }\n    }\n  }\n": typeof types.SignUpDocument,
    "\n  mutation LogIn($email: String!, $password: String!) {\n    login(email: $email, password: $password) {\n      token\n      expiresAt\n      me {\n        ...MeFields\n      }\n    }\n  }\n": typeof types.LogInDocument,
    "\n  fragment MeFields on Me {\n    email\n    tenantRoles\n  }\n": typeof types.MeFieldsFragmentDoc,
    "\n  query GpuCatalog {\n    gpuModels {\n      name\n      vramGib\n      architecture\n    }\n  }\n": typeof types.GpuCatalogDocument,
    "\n  fragment MachineFields on Machine {\n    id\n    name\n    gpuModel\n    gpuCount\n    vramGib\n    country\n    pricePerGpuHour\n    currency\n    listed\n    online\n    lastHeartbeatAt\n  }\n": typeof types.MachineFieldsFragmentDoc,
    "\n  query MyMachines {\n    myMachines {\n      ...MachineFields\n    }\n  }\n": typeof types.MyMachinesDocument,
    "\n  mutation RegisterMachine($input: RegisterMachineInput!) {\n    registerMachine(input: $input) {\n      machine {\n        ...MachineFields\n      }\n      agentToken\n    }\n  }\n": typeof types.RegisterMachineDocument,
    "\n  mutation SetPrice($machineId: ID!, $price: Decimal!) {\n    setMachinePricing(machineId: $machineId, pricePerGpuHour: $price) {\n      ...MachineFields\n    }\n  }\n": typeof types.SetPriceDocument,
    "\n  mutation ListMachine($machineId: ID!) {\n    listMachine(machineId: $machineId) {\n      ...MachineFields\n    }\n  }\n": typeof types.ListMachineDocument,
    "\n  mutation UnlistMachine($machineId: ID!) {\n    unlistMachine(machineId: $machineId) {\n      ...MachineFields\n    }\n  }\n": typeof types.UnlistMachineDocument,
};
const documents: Documents = {
    "\n  mutation SignUp($input: SignUpInput!) {\n    signUp(input: $input) {\n      token\n      expiresAt\n      me {\n        ...MeFields\n      }\n    }\n  }\n": types.SignUpDocument,
    "\n  mutation LogIn($email: String!, $password: String!) {\n    login(email: $email, password: $password) {\n      token\n      expiresAt\n      me {\n        ...MeFields\n      }\n    }\n  }\n": types.LogInDocument,
    "\n  fragment MeFields on Me {\n    email\n    tenantRoles\n  }\n": types.MeFieldsFragmentDoc,
    "\n  query GpuCatalog {\n    gpuModels {\n      name\n      vramGib\n      architecture\n    }\n  }\n": types.GpuCatalogDocument,
    "\n  fragment MachineFields on Machine {\n    id\n    name\n    gpuModel\n    gpuCount\n    vramGib\n    country\n    pricePerGpuHour\n    currency\n    listed\n    online\n    lastHeartbeatAt\n  }\n": types.MachineFieldsFragmentDoc,
    "\n  query MyMachines {\n    myMachines {\n      ...MachineFields\n    }\n  }\n": types.MyMachinesDocument,
    "\n  mutation RegisterMachine($input: RegisterMachineInput!) {\n    registerMachine(input: $input) {\n      machine {\n        ...MachineFields\n      }\n      agentToken\n    }\n  }\n": types.RegisterMachineDocument,
    "\n  mutation SetPrice($machineId: ID!, $price: Decimal!) {\n    setMachinePricing(machineId: $machineId, pricePerGpuHour: $price) {\n      ...MachineFields\n    }\n  }\n": types.SetPriceDocument,
    "\n  mutation ListMachine($machineId: ID!) {\n    listMachine(machineId: $machineId) {\n      ...MachineFields\n    }\n  }\n": types.ListMachineDocument,
    "\n  mutation UnlistMachine($machineId: ID!) {\n    unlistMachine(machineId: $machineId) {\n      ...MachineFields\n    }\n  }\n": types.UnlistMachineDocument,
};

/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation SignUp($input: SignUpInput!) {\n    signUp(input: $input) {\n      token\n      expiresAt\n      me {\n        ...MeFields\n      }\n    }\n  }\n"): typeof import('./graphql').SignUpDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation LogIn($email: String!, $password: String!) {\n    login(email: $email, password: $password) {\n      token\n      expiresAt\n      me {\n        ...MeFields\n      }\n    }\n  }\n"): typeof import('./graphql').LogInDocument;
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
export function graphql(source: "\n  fragment MachineFields on Machine {\n    id\n    name\n    gpuModel\n    gpuCount\n    vramGib\n    country\n    pricePerGpuHour\n    currency\n    listed\n    online\n    lastHeartbeatAt\n  }\n"): typeof import('./graphql').MachineFieldsFragmentDoc;
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


export function graphql(source: string) {
  return (documents as any)[source] ?? {};
}

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

export type MachineFieldsFragment = { id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAt: string | null };

export type MyMachinesQueryVariables = Exact<{ [key: string]: never; }>;


export type MyMachinesQuery = { myMachines: Array<{ id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAt: string | null }> };

export type RegisterMachineMutationVariables = Exact<{
  input: RegisterMachineInput;
}>;


export type RegisterMachineMutation = { registerMachine: { agentToken: string | null, machine: { id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAt: string | null } } };

export type SetPriceMutationVariables = Exact<{
  machineId: string | number;
  price: string;
}>;


export type SetPriceMutation = { setMachinePricing: { id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAt: string | null } };

export type ListMachineMutationVariables = Exact<{
  machineId: string | number;
}>;


export type ListMachineMutation = { listMachine: { id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAt: string | null } };

export type UnlistMachineMutationVariables = Exact<{
  machineId: string | number;
}>;


export type UnlistMachineMutation = { unlistMachine: { id: string, name: string, gpuModel: string, gpuCount: number, vramGib: number, country: string, pricePerGpuHour: string | null, currency: string, listed: boolean, online: boolean, lastHeartbeatAt: string | null } };

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
}
    `, {"fragmentName":"MachineFields"}) as unknown as TypedDocumentString<MachineFieldsFragment, unknown>;
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
}`) as unknown as TypedDocumentString<UnlistMachineMutation, UnlistMachineMutationVariables>;
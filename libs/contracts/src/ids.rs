//! Typed ids (issue 19), after Lemmy's `newtypes.rs`: one newtype per kind
//! of thing, so that a machine's id cannot be passed where a tenant's is
//! expected. On the wire each is the bare UUID it wraps (`serde`
//! transparent), in the database a `uuid` column (feature `diesel`), and in
//! GraphQL the `ID` scalar (feature `graphql`), so no body, message, column
//! or query changes shape.
//!
//! An internal endpoint's path parameters are typed ids
//! ([`crate::endpoints`]), which is where most ids cross a process.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A value that may fill one placeholder of an internal endpoint's path
/// ([`crate::endpoints`]): a typed id. Its text needs no escaping (a UUID),
/// which is why free text never goes in a path.
pub trait PathSegment: fmt::Display {}

macro_rules! id_type {
    ($( $(#[$meta:meta])* $name:ident; )+) => {$(
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        #[cfg_attr(feature = "diesel", derive(diesel::AsExpression, diesel::FromSqlRow))]
        #[cfg_attr(feature = "diesel", diesel(sql_type = diesel::sql_types::Uuid))]
        pub struct $name(pub Uuid);

        impl $name {
            /// A new id, time-ordered (UUID v7) like the ids the services mint.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            pub const fn into_uuid(self) -> Uuid {
                self.0
            }
        }

        impl From<Uuid> for $name {
            fn from(id: Uuid) -> Self {
                Self(id)
            }
        }

        impl From<$name> for Uuid {
            fn from(id: $name) -> Uuid {
                id.0
            }
        }

        // A typed id compares with a raw UUID (a row or a value not typed
        // yet): comparing cannot confuse two kinds of id the way passing one
        // can, and passing one still needs the type.
        impl PartialEq<Uuid> for $name {
            fn eq(&self, other: &Uuid) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<$name> for Uuid {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;

            fn from_str(text: &str) -> Result<Self, uuid::Error> {
                Uuid::parse_str(text).map(Self)
            }
        }

        impl PathSegment for $name {}

        #[cfg(feature = "diesel")]
        impl diesel::deserialize::FromSql<diesel::sql_types::Uuid, diesel::pg::Pg> for $name {
            fn from_sql(bytes: diesel::pg::PgValue<'_>) -> diesel::deserialize::Result<Self> {
                <Uuid as diesel::deserialize::FromSql<diesel::sql_types::Uuid, diesel::pg::Pg>>::from_sql(bytes)
                    .map(Self)
            }
        }

        #[cfg(feature = "diesel")]
        impl diesel::serialize::ToSql<diesel::sql_types::Uuid, diesel::pg::Pg> for $name {
            fn to_sql<'b>(
                &'b self,
                out: &mut diesel::serialize::Output<'b, '_, diesel::pg::Pg>,
            ) -> diesel::serialize::Result {
                <Uuid as diesel::serialize::ToSql<diesel::sql_types::Uuid, diesel::pg::Pg>>::to_sql(
                    &self.0, out,
                )
            }
        }

        /// The GraphQL `ID` scalar: the UUID's text. An `ID` that is not a
        /// UUID is a validation error, never a missing row.
        #[cfg(feature = "graphql")]
        #[async_graphql::Scalar(name = "ID")]
        impl async_graphql::ScalarType for $name {
            fn parse(value: async_graphql::Value) -> async_graphql::InputValueResult<Self> {
                match &value {
                    async_graphql::Value::String(text) => text
                        .parse::<$name>()
                        .map_err(|_| async_graphql::InputValueError::custom(
                            concat!("not a valid ", stringify!($name), " (a UUID)"),
                        )),
                    _ => Err(async_graphql::InputValueError::expected_type(value)),
                }
            }

            fn to_value(&self) -> async_graphql::Value {
                async_graphql::Value::String(self.0.to_string())
            }
        }
    )+};
}

id_type! {
    /// An account: a renter, a host or the platform itself.
    TenantId;
    /// A host's machine; also the id of its offer.
    MachineId;
    /// A rental's order (one per `createOrder`, also the key of what it holds).
    OrderId;
    /// A running (or stopped, or ended) rental.
    InstanceId;
    /// A renter's invoice.
    InvoiceId;
    /// A host's statement.
    StatementId;
    /// An API key.
    ApiKeyId;
    /// A team inside a tenant, with its own quota.
    TeamId;
    /// An outbound webhook endpoint.
    WebhookEndpointId;
    /// One delivery of an outbound webhook.
    DeliveryId;
    /// A renter's reservation of GPUs for a future block of whole hours
    /// (issue 20), or the part of one bought on resale.
    ReservationId;
    /// A holder's offer to sell future hours of a reservation.
    ResaleListingId;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_id_is_its_uuid_on_the_wire() {
        let uuid = Uuid::now_v7();
        let id = MachineId(uuid);
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            serde_json::to_string(&uuid).unwrap()
        );
        let back: MachineId = serde_json::from_str(&format!("\"{uuid}\"")).unwrap();
        assert_eq!(back, id);
        assert_eq!(id.to_string(), uuid.to_string());
        assert!("not-a-uuid".parse::<TenantId>().is_err());
    }
}

/// The GraphQL side: a typed id is the `ID` scalar, beside async-graphql's
/// own `ID` in one schema (the gateway's arguments are still `ID`).
#[cfg(all(test, feature = "graphql"))]
mod graphql_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use async_graphql::{EmptyMutation, EmptySubscription, ID, Object, Schema};

    struct Query;

    #[Object]
    impl Query {
        async fn echo(&self, tenant: TenantId, other: ID) -> TenantId {
            assert!(!other.is_empty());
            tenant
        }

        async fn machine(&self, id: MachineId) -> MachineId {
            id
        }
    }

    #[tokio::test]
    async fn typed_ids_are_the_id_scalar() {
        // The gateway builds its schema the same way once it takes typed ids.
        let schema = Schema::build_with_ignore_name_conflicts(
            Query,
            EmptyMutation,
            EmptySubscription,
            ["ID"],
        )
        .finish();
        let sdl = schema.sdl();
        assert!(sdl.contains("machine(id: ID!): ID!"), "{sdl}");
        let uuid = Uuid::now_v7();
        let answer = schema
            .execute(format!("{{ machine(id: \"{uuid}\") }}"))
            .await;
        assert!(answer.errors.is_empty(), "{:?}", answer.errors);
        assert_eq!(
            answer.data.into_json().unwrap()["machine"],
            uuid.to_string()
        );
        let refused = schema.execute("{ machine(id: \"not-a-uuid\") }").await;
        assert!(
            refused.errors[0].message.contains("not a valid MachineId"),
            "{:?}",
            refused.errors
        );
    }
}

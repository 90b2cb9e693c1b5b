use crate::ids::TenantId;
use std::marker::PhantomData;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The JSON envelope of every message on the broker (see
/// `api-specs/asyncapi.yaml`). `id` is a UUIDv7 and is what consumers
/// deduplicate on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Envelope {
    pub id: Uuid,
    #[serde(rename = "type")]
    pub kind: String,
    pub version: u32,
    pub occurred_at: DateTime<Utc>,
    pub tenant_id: Option<TenantId>,
    pub correlation_id: Option<String>,
    pub payload: serde_json::Value,
}

/// A message kind together with the payload type it carries
/// ([`crate::events::kinds`]): [`Envelope::new`] takes the payload of its
/// kind's type and no other, so a kind and its payload cannot part.
pub struct Kind<P> {
    name: &'static str,
    payload: PhantomData<fn() -> P>,
}

impl<P> Kind<P> {
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            payload: PhantomData,
        }
    }

    /// The kind's name: the envelope's `type` and the routing key.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<P> Clone for Kind<P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for Kind<P> {}

impl<P> std::fmt::Debug for Kind<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl<P> std::fmt::Display for Kind<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl Envelope {
    /// An envelope of `kind` around `payload`, of the kind's own payload type.
    pub fn new<P: Serialize>(
        kind: Kind<P>,
        occurred_at: DateTime<Utc>,
        tenant_id: Option<TenantId>,
        correlation_id: Option<String>,
        payload: &P,
    ) -> Result<Self, serde_json::Error> {
        Self::named(kind.name(), occurred_at, tenant_id, correlation_id, payload)
    }

    /// An envelope of a kind outside [`crate::events::kinds`] (tests of the
    /// plumbing, foreign messages): nothing ties the payload to the kind.
    pub fn named<P: Serialize>(
        kind: &str,
        occurred_at: DateTime<Utc>,
        tenant_id: Option<TenantId>,
        correlation_id: Option<String>,
        payload: &P,
    ) -> Result<Self, serde_json::Error> {
        Ok(Self {
            id: Uuid::now_v7(),
            kind: kind.to_owned(),
            version: 1,
            occurred_at,
            tenant_id,
            correlation_id,
            payload: serde_json::to_value(payload)?,
        })
    }

    pub fn payload<P: for<'de> Deserialize<'de>>(&self) -> Result<P, serde_json::Error> {
        serde_json::from_value(self.payload.clone())
    }
}

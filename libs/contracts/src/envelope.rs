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
    pub tenant_id: Option<Uuid>,
    pub correlation_id: Option<String>,
    pub payload: serde_json::Value,
}

impl Envelope {
    pub fn new<P: Serialize>(
        kind: &str,
        occurred_at: DateTime<Utc>,
        tenant_id: Option<Uuid>,
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

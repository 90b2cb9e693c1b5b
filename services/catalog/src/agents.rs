//! Each machine's agent gets its own RabbitMQ user, made through the
//! management HTTP API: `agent-<machine_id>.<generation>` (one per token,
//! [`agent_username`]) with the agent token as its password, allowed to
//! publish only `agent.<machine_id>.*` to the agents exchange and to declare
//! and read only its command queue `cmd.<machine_id>`, which the agent
//! declares itself on connect (DESIGN section 3, docs/host-agent.md). The
//! catalog declares no queue per machine: 100,000 machines on one broker
//! (docs/scaling.md). Rotating or revoking deletes the old token's user and
//! closes its connections, so an old token stops working at once.

use actix_web::web;
use contracts::api::{AgentTokenRevoked, HostMachineRequest};
use contracts::ids::{MachineId, TenantId};
use diesel::prelude::*;
use platform::endpoint::Reply;
use platform::internal::ServiceCaller;
use platform::rabbitmq_admin::RabbitAdmin;
use platform::{Config, Db, PlatformError};
use rand::RngCore;
use schema::catalog::machines;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::Error;
use crate::reliability::Settings;

/// The RabbitMQ user of a machine's agent for the token whose SHA-256 is
/// `token_sha256` (hex, as `machines.agent_token_sha256` stores it):
/// `agent-<machine_id>.<its first 16 hex digits>`, what the agent computes
/// from its token (`host_agent::protocol::username`). One user per token
/// generation: retiring a token deletes its user and closes every
/// connection tracked for it, however young, and the new token's
/// connections, under another name, are not touched.
pub fn agent_username(machine_id: MachineId, token_sha256: &str) -> String {
    let generation = token_sha256.get(..16).unwrap_or(token_sha256);
    format!("agent-{machine_id}.{generation}")
}

/// The SHA-256 of a token, in hex.
pub fn token_sha256(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The one user per machine from before token generations; retired with
/// any generation (a machine registered before them).
fn legacy_username(machine_id: MachineId) -> String {
    format!("agent-{machine_id}")
}

/// The queue the platform sends a machine's commands to, which its agent
/// declares (`host_agent::protocol::command_queue`).
pub fn command_queue(machine_id: MachineId) -> String {
    format!("cmd.{machine_id}")
}

/// The per-machine quorum queue the catalog declared before agents declared
/// their own (`host_agent::protocol::legacy_command_queue`): only deleted.
pub fn legacy_command_queue(machine_id: MachineId) -> String {
    format!("host.{machine_id}")
}

/// `^<name>$` with the name's regex metacharacters escaped.
fn exact(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 8);
    out.push('^');
    for c in name.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('$');
    out
}

/// Grants and revokes agents' broker access.
#[derive(Clone)]
pub struct AgentAccess {
    admin: Result<RabbitAdmin, String>,
    vhost: Result<String, String>,
    exchange: String,
    settings: Settings,
}

impl AgentAccess {
    /// Uses `rabbitmq_management_url`, the vhost of `amqp_url` and
    /// `agents_exchange`. A malformed URL surfaces as an error of the first
    /// call, so building the service never fails on it.
    pub fn from_config(config: &Config) -> Result<Self, platform::PlatformError> {
        Ok(Self {
            admin: RabbitAdmin::new(&config.rabbitmq_management_url).map_err(|e| e.to_string()),
            vhost: config.amqp_vhost().map_err(|e| e.to_string()),
            exchange: config.agents_exchange.clone(),
            settings: Settings::from_config(config)?,
        })
    }

    /// The heartbeat grace and reliability window this catalog runs with.
    pub fn settings(&self) -> Settings {
        self.settings
    }

    fn parts(&self) -> Result<(&RabbitAdmin, &str), Error> {
        let admin = self
            .admin
            .as_ref()
            .map_err(|e| PlatformError::Config(e.clone()))?;
        let vhost = self
            .vhost
            .as_ref()
            .map_err(|e| PlatformError::Config(e.clone()))?;
        Ok((admin, vhost.as_str()))
    }

    /// Creates (or updates) the broker user of `token`'s generation with
    /// `token` as its password and the user's permissions, and deletes the
    /// machine's legacy queue `host.<machine_id>`. No queue is declared: the
    /// agent declares `cmd.<machine_id>` when it connects. Idempotent. A
    /// rotation then retires the previous generation ([`Self::retire`]).
    pub async fn grant(&self, machine_id: MachineId, token: &str) -> Result<(), Error> {
        let (admin, vhost) = self.parts()?;
        let user = agent_username(machine_id, &token_sha256(token));
        admin.put_user(&user, token, &[]).await?;
        self.permit(admin, vhost, machine_id, &user).await?;
        admin
            .delete_queue(vhost, &legacy_command_queue(machine_id))
            .await?;
        tracing::info!(machine.id = %machine_id, user, "agent broker access granted");
        Ok(())
    }

    /// The permissions of an agent's user: configure (declare) and read
    /// (consume) only its command queue; write only the agents exchange, and
    /// on it only its own machine's routing keys.
    async fn permit(
        &self,
        admin: &RabbitAdmin,
        vhost: &str,
        machine_id: MachineId,
        user: &str,
    ) -> Result<(), Error> {
        let queue = exact(&command_queue(machine_id));
        admin
            .set_permissions(vhost, user, &queue, &exact(&self.exchange), &queue)
            .await?;
        admin
            .set_topic_permissions(
                vhost,
                user,
                &self.exchange,
                &format!("^agent\\.{machine_id}\\..*"),
                "^$",
            )
            .await?;
        Ok(())
    }

    /// Brings agent users granted before agents declared their own queues up
    /// to date, at catalog start: every `agent-<machine_id>[.<gen>]` user of
    /// the vhost whose permissions are not [`Self::permit`]'s gets them (an
    /// agent of this version declares `cmd.<machine_id>` on connect and would
    /// be refused without), and every legacy `host.<machine_id>` queue is
    /// deleted. Idempotent and cheap once done: one listing of the vhost's
    /// permissions, one filtered listing of its queues. Returns how many users
    /// and queues it changed.
    pub async fn migrate(&self) -> Result<(usize, usize), Error> {
        let (admin, vhost) = self.parts()?;
        let mut users = 0;
        for permission in admin.permissions_in(vhost).await? {
            let Some(machine_id) = agent_machine(&permission.user) else {
                continue;
            };
            let queue = exact(&command_queue(MachineId(machine_id)));
            if permission.configure == queue && permission.read == queue {
                continue;
            }
            self.permit(admin, vhost, MachineId(machine_id), &permission.user)
                .await?;
            users += 1;
        }
        let mut queues = 0;
        for name in admin.queue_names_matching(vhost, "^host\\.").await? {
            let is_machine = name
                .strip_prefix("host.")
                .is_some_and(|id| id.parse::<Uuid>().is_ok());
            if is_machine {
                admin.delete_queue(vhost, &name).await?;
                queues += 1;
            }
        }
        if users > 0 || queues > 0 {
            tracing::info!(
                users,
                queues,
                "agent broker access migrated to agent-declared command queues"
            );
        }
        Ok((users, queues))
    }

    /// Retires the token generation whose hash is `token_sha256` (and the
    /// machine's pre-generation user): deletes the broker user, so nothing
    /// more can log in with it, then closes every connection the broker
    /// tracks for it until none is left, and looks once more a moment later.
    /// When this returns, no connection made with that token is open,
    /// however young. The command queue stays (the next generation reads
    /// it; unused, it expires by itself).
    /// Idempotent.
    pub async fn retire(
        &self,
        machine_id: MachineId,
        token_sha256: &str,
        reason: &str,
    ) -> Result<(), Error> {
        let (admin, _) = self.parts()?;
        for user in [
            agent_username(machine_id, token_sha256),
            legacy_username(machine_id),
        ] {
            admin.delete_user(&user).await?;
            admin.close_all_connections_of(&user, reason).await?;
        }
        tracing::info!(machine.id = %machine_id, reason, "agent token generation retired");
        Ok(())
    }

    /// Revokes the generation of `token_sha256`: see [`Self::retire`].
    pub async fn revoke(&self, machine_id: MachineId, token_sha256: &str) -> Result<(), Error> {
        self.retire(machine_id, token_sha256, "agent token revoked")
            .await
    }

    /// Deletes the broker user of the machine's token (closing its
    /// connections) and its command queues, `cmd.<machine_id>` and the legacy
    /// `host.<machine_id>`: the machine is gone. Idempotent.
    pub async fn remove(&self, machine_id: MachineId, token_sha256: &str) -> Result<(), Error> {
        self.retire(machine_id, token_sha256, "machine deleted")
            .await?;
        let (admin, vhost) = self.parts()?;
        admin
            .delete_queue(vhost, &command_queue(machine_id))
            .await?;
        admin
            .delete_queue(vhost, &legacy_command_queue(machine_id))
            .await?;
        tracing::info!(machine.id = %machine_id, "agent queues deleted");
        Ok(())
    }
}

/// The machine of an agent's broker user: `agent-<machine_id>.<gen>`, or
/// the pre-generation `agent-<machine_id>`.
fn agent_machine(user: &str) -> Option<Uuid> {
    let rest = user.strip_prefix("agent-")?;
    let id = rest.split_once('.').map_or(rest, |(id, _)| id);
    id.parse().ok()
}

/// The stored token hash of the machine, when `host_tenant_id` owns it and
/// it is not deleted: a deleted machine has no agent any more, and issuing
/// or revoking a token for it would re-create its broker user and queue.
pub(crate) async fn owned_token_hash(
    db: &Db,
    machine_id: MachineId,
    host_tenant_id: TenantId,
) -> Result<String, Error> {
    db.run(move |conn| {
        machines::table
            .find(machine_id)
            .filter(machines::host_tenant_id.eq(host_tenant_id))
            .filter(machines::deleted_at.is_null())
            .select(machines::agent_token_sha256)
            .first::<String>(conn)
            .optional()
            .map_err(Error::from)
    })
    .await?
    .ok_or_else(|| Error::NotFound(format!("machine {machine_id} not found")))
}

/// Whether `host_tenant_id` owns the machine; another host's machine is as
/// good as missing.
pub(crate) async fn ensure_owner(
    db: &Db,
    machine_id: MachineId,
    host_tenant_id: TenantId,
) -> Result<(), Error> {
    let found: Option<Uuid> = db
        .run(move |conn| {
            machines::table
                .find(machine_id)
                .filter(machines::host_tenant_id.eq(host_tenant_id))
                .select(machines::id)
                .first(conn)
                .optional()
                .map_err(Error::from)
        })
        .await?;
    found
        .map(|_| ())
        .ok_or_else(|| Error::NotFound(format!("machine {machine_id} not found")))
}

/// `POST /internal/machines/{id}/agent-token/revoke` with
/// [`HostMachineRequest`]: revokes the agent's broker access and replaces the
/// stored token hash with a random one, so the old token is worthless
/// everywhere. The host must own the machine, and it must not be deleted
/// (404 otherwise).
pub async fn revoke_route(
    _: ServiceCaller,
    db: web::Data<Db>,
    access: web::Data<AgentAccess>,
    path: web::Path<MachineId>,
    body: web::Json<HostMachineRequest>,
) -> Result<Reply<AgentTokenRevoked>, Error> {
    let machine_id = path.into_inner().into_uuid();
    let host_tenant_id = body.host_tenant_id;
    let hash = owned_token_hash(&db, MachineId(machine_id), host_tenant_id).await?;
    // The broker first: it is what the token opens. A failure after it
    // leaves the token dead there, and a retry finishes the job.
    access.revoke(MachineId(machine_id), &hash).await?;
    db.run(move |conn| {
        let mut secret = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut secret);
        diesel::update(
            machines::table
                .find(machine_id)
                .filter(machines::host_tenant_id.eq(host_tenant_id))
                .filter(machines::deleted_at.is_null()),
        )
        .set((
            machines::agent_token_sha256.eq(hex::encode(Sha256::digest(secret))),
            machines::updated_at.eq(diesel::dsl::now),
        ))
        .execute(conn)
        .map_err(Error::from)
    })
    .await?;
    tracing::info!(machine.id = %machine_id, "agent token revoked");
    Ok(Reply::ok(AgentTokenRevoked {
        machine_id: MachineId(machine_id),
        revoked: true,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_exact_patterns() {
        assert_eq!(exact("gpumarket.agents"), "^gpumarket\\.agents$");
        let id = Uuid::nil();
        assert_eq!(
            exact(&command_queue(MachineId(id))),
            "^cmd\\.00000000-0000-0000-0000-000000000000$"
        );
    }

    #[test]
    fn agent_users_name_their_machine() {
        let id = Uuid::now_v7();
        assert_eq!(
            agent_machine(&agent_username(MachineId(id), &token_sha256("t"))),
            Some(id)
        );
        assert_eq!(agent_machine(&legacy_username(MachineId(id))), Some(id));
        assert_eq!(agent_machine("guest"), None);
        assert_eq!(agent_machine("agent-nope.0123"), None);
    }
}

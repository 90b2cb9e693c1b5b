//! The simulated driver: no containers, but real state. It keeps, per
//! machine, which GPU indices are bound to which instance, containers,
//! network attachments, volumes and authorised SSH keys (in
//! `provisioner.sim_resources`, so the state survives a worker crash like a
//! real host's would). Readiness passes only when that state is complete and
//! consistent. Latency and failures are injectable per step.
//!
//! Deprovisioning removes the instance's resources kind by kind, then
//! `validate_clean` fails while any row of the instance remains. An injected
//! failure on a cleanup step (`revoke_ssh`, `stop_container`, `unbind_gpus`,
//! `detach_network`, `wipe_volume`) is *silent*: the step reports success but
//! leaves its resource behind — the fault the validation exists to catch (a
//! loud failure would merely be retried).

use contracts::ids::{InstanceId, MachineId};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use contracts::events::{DeprovisionInstance, ProvisionInstance, StopInstance};
use diesel::prelude::*;
use platform::{Config, Db};
use schema::provisioner::sim_resources;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::Error;
use crate::driver::{BoxFuture, Driver, Step};

pub struct SimulatedDriver {
    db: Db,
    latency: HashMap<Step, Duration>,
    /// Remaining injected failures per step.
    failures: Mutex<HashMap<Step, u32>>,
    /// What each container sends per second (`GPUMARKET_SIM_TRAFFIC_BYTES_PER_SECOND`).
    traffic_bytes_per_second: u64,
}

fn parse_map(raw: &str, what: &str) -> Result<HashMap<Step, u64>, Error> {
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|pair| {
            let (step, n) = pair.split_once('=').ok_or_else(|| {
                Error::Config(format!("{what}: expected step=number, got {pair:?}"))
            })?;
            let step = Step::parse(step.trim())
                .ok_or_else(|| Error::Config(format!("{what}: unknown step {step:?}")))?;
            let n = n
                .trim()
                .parse()
                .map_err(|_| Error::Config(format!("{what}: {n:?} is not a number")))?;
            Ok((step, n))
        })
        .collect()
}

impl SimulatedDriver {
    pub fn from_config(db: Db, config: &Config) -> Result<Self, Error> {
        let settings = config.settings::<crate::ProvisionerSettings>()?;
        let latency = parse_map(
            &settings.sim_step_latency_ms,
            "GPUMARKET_SIM_STEP_LATENCY_MS",
        )?
        .into_iter()
        .map(|(step, ms)| (step, Duration::from_millis(ms)))
        .collect();
        let failures = parse_map(&settings.sim_step_failures, "GPUMARKET_SIM_STEP_FAILURES")?
            .into_iter()
            .map(|(step, n)| (step, n as u32))
            .collect();
        Ok(Self {
            db,
            latency,
            failures: Mutex::new(failures),
            traffic_bytes_per_second: settings.sim_traffic_bytes_per_second,
        })
    }

    /// The network counters of the containers on `machine_id`: `(instance,
    /// sent, received)`, growing with each container's age, so a container
    /// started again after a stop counts from zero (a counter reset, as on a
    /// real host). Nothing when simulated traffic is off.
    pub async fn traffic(&self, machine_id: MachineId) -> Result<Vec<(Uuid, u64, u64)>, Error> {
        let rate = self.traffic_bytes_per_second;
        if rate == 0 {
            return Ok(Vec::new());
        }
        let containers: Vec<(Uuid, DateTime<Utc>)> = self
            .db
            .run(move |conn| {
                sim_resources::table
                    .filter(sim_resources::machine_id.eq(machine_id))
                    .filter(sim_resources::kind.eq("container"))
                    .select((sim_resources::instance_id, sim_resources::created_at))
                    .load(conn)
                    .map_err(Error::from)
            })
            .await?;
        let now = Utc::now();
        Ok(containers
            .into_iter()
            .map(|(instance_id, since)| {
                let age = u64::try_from((now - since).num_seconds()).unwrap_or(0);
                let sent = age.saturating_mul(rate);
                (instance_id, sent, sent.saturating_mul(4))
            })
            .collect())
    }

    fn injected_failure(&self, step: Step) -> bool {
        let Ok(mut failures) = self.failures.lock() else {
            return false;
        };
        match failures.get_mut(&step) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }

    async fn apply(&self, step: Step, job: ProvisionInstance) -> Result<(), Error> {
        if let Some(delay) = self.latency.get(&step) {
            tokio::time::sleep(*delay).await;
        }
        if self.injected_failure(step) {
            return Err(Error::Step {
                step: step.as_str(),
                reason: "injected failure".into(),
            });
        }
        self.db
            .tx(move |conn| match step {
                Step::ValidateHost => {
                    if job.gpu_count > job.machine_gpu_count {
                        return Err(fail(step, "machine has fewer GPUs than the order"));
                    }
                    Ok(())
                }
                Step::PullImage => Ok(()),
                Step::BindGpus => bind_gpus(conn, &job),
                Step::AttachNetwork => {
                    add(conn, &job, "network", format!("net-{}", job.instance_id))
                }
                Step::CreateVolume => add(conn, &job, "volume", format!("vol-{}", job.instance_id)),
                Step::StartContainer => {
                    add(conn, &job, "container", format!("ctr-{}", job.instance_id))
                }
                Step::AuthorizeSsh => match &job.ssh_public_key {
                    Some(key) => {
                        let fingerprint = hex::encode(&Sha256::digest(key.as_bytes())[..8]);
                        add(
                            conn,
                            &job,
                            "ssh_key",
                            format!("{}:{fingerprint}", job.instance_id),
                        )
                    }
                    None => Ok(()),
                },
                Step::ReadinessCheck => readiness(conn, &job),
                other => Err(fail(other, "not a provisioning step")),
            })
            .await
    }
}

impl SimulatedDriver {
    async fn deprovision(&self, step: Step, job: DeprovisionInstance) -> Result<(), Error> {
        if let Some(delay) = self.latency.get(&step) {
            tokio::time::sleep(*delay).await;
        }
        let kinds: &'static [&'static str] = match step {
            Step::RevokeSsh => &["ssh_key"],
            Step::StopContainer => &["container"],
            Step::UnbindGpus => &["gpu"],
            Step::DetachNetwork => &["network"],
            Step::WipeVolume => &["volume"],
            Step::ValidateClean => {
                if self.injected_failure(step) {
                    return Err(fail(step, "injected failure"));
                }
                return self.db.run(move |conn| validate_clean(conn, &job)).await;
            }
            other => return Err(fail(other, "not a deprovisioning step")),
        };
        if self.injected_failure(step) {
            tracing::warn!(step = step.as_str(), instance.id = %job.instance_id, "injected silent failure: resource left behind");
            return Ok(());
        }
        self.db
            .run(move |conn| {
                diesel::delete(
                    sim_resources::table
                        .filter(sim_resources::machine_id.eq(job.machine_id))
                        .filter(sim_resources::instance_id.eq(job.instance_id))
                        .filter(sim_resources::kind.eq_any(kinds)),
                )
                .execute(conn)
                .map(|_| ())
                .map_err(Error::from)
            })
            .await
    }
}

/// Clean means: nothing on the machine belongs to the instance any more.
fn validate_clean(conn: &mut PgConnection, job: &DeprovisionInstance) -> Result<(), Error> {
    let left: Vec<(String, String)> = sim_resources::table
        .filter(sim_resources::machine_id.eq(job.machine_id))
        .filter(sim_resources::instance_id.eq(job.instance_id))
        .select((sim_resources::kind, sim_resources::name))
        .order((sim_resources::kind, sim_resources::name))
        .load(conn)?;
    if left.is_empty() {
        return Ok(());
    }
    let what: Vec<String> = left.iter().map(|(k, n)| format!("{k} {n}")).collect();
    Err(fail(
        Step::ValidateClean,
        &format!("machine not clean: {} left", what.join(", ")),
    ))
}

fn fail(step: Step, reason: &str) -> Error {
    Error::Step {
        step: step.as_str(),
        reason: reason.to_owned(),
    }
}

fn add(
    conn: &mut PgConnection,
    job: &ProvisionInstance,
    kind: &str,
    name: String,
) -> Result<(), Error> {
    diesel::insert_into(sim_resources::table)
        .values((
            sim_resources::machine_id.eq(job.machine_id),
            sim_resources::kind.eq(kind),
            sim_resources::name.eq(name),
            sim_resources::instance_id.eq(job.instance_id),
        ))
        .on_conflict_do_nothing()
        .execute(conn)?;
    Ok(())
}

fn held(
    conn: &mut PgConnection,
    machine_id: MachineId,
    instance_id: InstanceId,
    kind: &str,
) -> QueryResult<Vec<String>> {
    sim_resources::table
        .filter(sim_resources::machine_id.eq(machine_id))
        .filter(sim_resources::instance_id.eq(instance_id))
        .filter(sim_resources::kind.eq(kind))
        .select(sim_resources::name)
        .load(conn)
}

/// Binds free GPU indices until the instance holds as many as it ordered. The
/// primary key (machine, kind, name) makes an index bindable once.
fn bind_gpus(conn: &mut PgConnection, job: &ProvisionInstance) -> Result<(), Error> {
    // Workers binding on the same machine at once would read the same free
    // indices, and the second insert would be silently skipped, leaving an
    // instance that passed this step with no GPU (found by CI: readiness then
    // failed "0 of 1 GPUs bound"). One lock per machine around the
    // read-then-insert, as a host's own allocator would serialise it.
    diesel::sql_query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind::<diesel::sql_types::Text, _>(format!("sim-gpus:{}", job.machine_id))
        .execute(conn)?;
    let mine = held(conn, job.machine_id, job.instance_id, "gpu")?.len() as i32;
    if mine >= job.gpu_count {
        return Ok(());
    }
    let taken: Vec<String> = sim_resources::table
        .filter(sim_resources::machine_id.eq(job.machine_id))
        .filter(sim_resources::kind.eq("gpu"))
        .select(sim_resources::name)
        .load(conn)?;
    let free: Vec<String> = (0..job.machine_gpu_count)
        .map(|i| i.to_string())
        .filter(|i| !taken.contains(i))
        .take((job.gpu_count - mine) as usize)
        .collect();
    if (free.len() as i32) < job.gpu_count - mine {
        return Err(fail(
            Step::BindGpus,
            "not enough free GPU indices on the machine",
        ));
    }
    for index in free {
        add(conn, job, "gpu", index)?;
    }
    // Loud, so the step is retried, should an index still have been taken.
    let bound = held(conn, job.machine_id, job.instance_id, "gpu")?.len() as i32;
    if bound < job.gpu_count {
        return Err(fail(
            Step::BindGpus,
            &format!("{bound} of {} GPU indices bound", job.gpu_count),
        ));
    }
    Ok(())
}

/// Ready means: exactly the ordered GPUs bound, a network, a volume, a
/// running container, and the renter's key authorised when one was given.
fn readiness(conn: &mut PgConnection, job: &ProvisionInstance) -> Result<(), Error> {
    let gpus = held(conn, job.machine_id, job.instance_id, "gpu")?.len() as i32;
    if gpus != job.gpu_count {
        return Err(fail(
            Step::ReadinessCheck,
            &format!("{gpus} of {} GPUs bound", job.gpu_count),
        ));
    }
    for kind in ["network", "volume", "container"] {
        if held(conn, job.machine_id, job.instance_id, kind)?.is_empty() {
            return Err(fail(Step::ReadinessCheck, &format!("no {kind}")));
        }
    }
    if job.ssh_public_key.is_some()
        && held(conn, job.machine_id, job.instance_id, "ssh_key")?.is_empty()
    {
        return Err(fail(Step::ReadinessCheck, "SSH key not authorised"));
    }
    Ok(())
}

impl Driver for SimulatedDriver {
    fn run_step<'a>(
        &'a self,
        step: Step,
        job: &'a ProvisionInstance,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.apply(step, job.clone()))
    }

    fn deprovision_step<'a>(
        &'a self,
        step: Step,
        job: &'a DeprovisionInstance,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.deprovision(step, job.clone()))
    }

    fn stop<'a>(
        &'a self,
        command: &'a StopInstance,
        issued_at: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let command = command.clone();
        Box::pin(async move {
            self.db
                .run(move |conn| {
                    diesel::delete(
                        sim_resources::table
                            .filter(sim_resources::machine_id.eq(command.machine_id))
                            .filter(sim_resources::instance_id.eq(command.instance_id))
                            .filter(sim_resources::kind.eq_any(["gpu", "container"]))
                            .filter(sim_resources::created_at.lt(issued_at)),
                    )
                    .execute(conn)
                    .map(|_| ())
                    .map_err(Error::from)
                })
                .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_maps_parse_and_reject_unknown_steps() {
        let map = parse_map("bind_gpus=300, readiness_check=5", "x").unwrap();
        assert_eq!(map[&Step::BindGpus], 300);
        assert_eq!(map[&Step::ReadinessCheck], 5);
        assert_eq!(
            parse_map("wipe_volume=1", "x").unwrap()[&Step::WipeVolume],
            1
        );
        assert!(parse_map("warp_drive=1", "x").is_err());
        assert!(parse_map("bind_gpus", "x").is_err());
        assert!(parse_map("", "x").unwrap().is_empty());
    }
}

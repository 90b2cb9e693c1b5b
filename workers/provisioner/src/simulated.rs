//! The simulated driver: no containers, but real state. It keeps, per
//! machine, which GPU indices (or MIG slices) are bound to which instance,
//! containers, network attachments, volumes and authorised SSH keys (in
//! `provisioner.sim_resources`, so the state survives a worker crash like a
//! real host's would). Readiness passes only when that state is complete and
//! consistent. Latency and failures are injectable per step.
//!
//! GPUs are bound as the catalog allocated them: exactly the job's
//! `gpu_indices`, or its MIG slice (on the placement rules of
//! `contracts::mig`: a slice shares no memory slice with another, and a GPU
//! is rented whole or holds slices, never both); a job without either (an
//! earlier release) gets the lowest free indices ([`plan_gpus`]).
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
use contracts::mig::{Mask, MigSlice, span};
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
            // Slices too: they are kept under the same kind.
            Step::UnbindGpus => &[GPU],
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

/// The kind GPU binds and MIG slices are both kept under, told apart by
/// name: a bare index (`3`) is a whole GPU, `gpu<index>:<start>+<size>` a
/// slice. One kind, so that whatever releases GPU binds (`unbind_gpus`, a
/// stop, a cleanup) releases slices too; a kind of its own (`mig`) would
/// need the table's CHECK constraint widened, which is a migration.
const GPU: &str = "gpu";

/// The resource name of a slice: `gpu0:4+4`.
pub fn slice_name(slice: &MigSlice) -> String {
    format!("gpu{}:{}+{}", slice.gpu_index, slice.start, slice.size)
}

/// A `gpu` resource as placement reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Whole(u32),
    Slice { gpu: u32, mask: Mask },
}

fn parse_held(name: &str) -> Option<Held> {
    if let Ok(index) = name.parse() {
        return Some(Held::Whole(index));
    }
    let (gpu, place) = name.strip_prefix("gpu")?.split_once(':')?;
    let (start, size) = place.split_once('+')?;
    Some(Held::Slice {
        gpu: gpu.parse().ok()?,
        mask: span(start.parse().ok()?, size.parse().ok()?),
    })
}

/// The `gpu` resources to add to an instance and to drop from it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Change {
    add: Vec<String>,
    drop: Vec<String>,
}

/// What binding `job`'s GPUs changes, given every `gpu` resource of the
/// machine (`(name, instance)`), or why it is refused. What the instance
/// already holds of its allocation stays (a redelivered step changes
/// nothing); what it holds besides (an earlier allocation) is dropped.
fn plan_gpus(rows: &[(String, Uuid)], job: &ProvisionInstance) -> Result<Change, String> {
    let me: Uuid = job.instance_id.into();
    let mine: Vec<&String> = rows
        .iter()
        .filter(|(_, i)| *i == me)
        .map(|(n, _)| n)
        .collect();
    let others: Vec<Held> = rows
        .iter()
        .filter(|(_, i)| *i != me)
        .filter_map(|(n, _)| parse_held(n))
        .collect();
    let whole = |gpu: u32| others.contains(&Held::Whole(gpu));
    let slices = |gpu: u32| {
        others.iter().fold(0, |held, h| match h {
            Held::Slice { gpu: g, mask } if *g == gpu => held | mask,
            _ => held,
        })
    };
    let on_machine = |gpu: u32| i64::from(gpu) < i64::from(job.machine_gpu_count);
    let wanted: Vec<String> = if let Some(slice) = &job.mig {
        let what = format!(
            "MIG slice {} at memory slices {}..{} of GPU {}",
            slice.profile,
            slice.start,
            u16::from(slice.start) + u16::from(slice.size),
            slice.gpu_index
        );
        if !on_machine(slice.gpu_index) {
            return Err(format!(
                "{what}: the machine has no GPU {}",
                slice.gpu_index
            ));
        }
        if slice.mask() == 0 {
            return Err(format!("{what}: outside the GPU's memory slices 0..8"));
        }
        if whole(slice.gpu_index) {
            return Err(format!(
                "{what}: the GPU is bound whole to another instance"
            ));
        }
        if slices(slice.gpu_index) & slice.mask() != 0 {
            return Err(format!("{what} overlaps another instance's slice"));
        }
        vec![slice_name(slice)]
    } else if !job.gpu_indices.is_empty() {
        let mut wanted = Vec::with_capacity(job.gpu_indices.len());
        for &index in &job.gpu_indices {
            let name = index.to_string();
            if !on_machine(index) {
                return Err(format!("the machine has no GPU index {index}"));
            }
            if wanted.contains(&name) {
                return Err(format!("GPU index {index} is allocated twice"));
            }
            if whole(index) {
                return Err(format!("GPU index {index} is bound to another instance"));
            }
            if slices(index) != 0 {
                return Err(format!(
                    "GPU index {index} holds another instance's MIG slice"
                ));
            }
            wanted.push(name);
        }
        wanted
    } else {
        // As before allocations carried indices: the instance keeps its
        // whole GPUs when they are enough, else gets the lowest free ones.
        let held: Vec<String> = mine
            .iter()
            .filter(|n| matches!(parse_held(n), Some(Held::Whole(_))))
            .map(|n| (*n).clone())
            .collect();
        let want = usize::try_from(job.gpu_count.max(0)).unwrap_or(0);
        if held.len() >= want {
            held
        } else {
            let free: Vec<String> = (0..u32::try_from(job.machine_gpu_count.max(0)).unwrap_or(0))
                .filter(|&i| !whole(i) && slices(i) == 0)
                .map(|i| i.to_string())
                .filter(|i| !held.contains(i))
                .take(want - held.len())
                .collect();
            if held.len() + free.len() < want {
                return Err("not enough free GPU indices on the machine".into());
            }
            held.into_iter().chain(free).collect()
        }
    };
    Ok(Change {
        add: wanted
            .iter()
            .filter(|w| !mine.contains(w))
            .cloned()
            .collect(),
        drop: mine
            .into_iter()
            .filter(|m| !wanted.contains(m))
            .cloned()
            .collect(),
    })
}

/// Whether the instance's `gpu` resources are what `job` allocated:
/// exactly its slice, exactly its indices, or (a job without either) as
/// many GPUs as it ordered.
fn gpus_bound(names: &[String], job: &ProvisionInstance) -> Result<(), String> {
    let mut names: Vec<&str> = names.iter().map(String::as_str).collect();
    names.sort_unstable();
    if let Some(slice) = &job.mig {
        let name = slice_name(slice);
        if names != [name.as_str()] {
            return Err(format!("MIG slice {name} not bound (bound: {names:?})"));
        }
    } else if !job.gpu_indices.is_empty() {
        let wanted: Vec<String> = job.gpu_indices.iter().map(u32::to_string).collect();
        let mut wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
        wanted.sort_unstable();
        if names != wanted {
            return Err(format!("GPU indices {names:?} bound, {wanted:?} allocated"));
        }
    } else if names.len() as i32 != job.gpu_count {
        return Err(format!("{} of {} GPUs bound", names.len(), job.gpu_count));
    }
    Ok(())
}

/// Binds the job's GPUs or slice ([`plan_gpus`]). The primary key (machine,
/// kind, name) makes an index (or one slice name) bindable once; that two
/// slices never share a memory slice is the plan's, under the lock.
fn bind_gpus(conn: &mut PgConnection, job: &ProvisionInstance) -> Result<(), Error> {
    // Workers binding on the same machine at once would read the same free
    // indices, and the second insert would be silently skipped, leaving an
    // instance that passed this step with no GPU (found by CI: readiness then
    // failed "0 of 1 GPUs bound"); two overlapping slices have different
    // names and would both be inserted. One lock per machine around the
    // read-then-insert, as a host's own allocator would serialise it.
    diesel::sql_query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind::<diesel::sql_types::Text, _>(format!("sim-gpus:{}", job.machine_id))
        .execute(conn)?;
    let rows: Vec<(String, Uuid)> = sim_resources::table
        .filter(sim_resources::machine_id.eq(job.machine_id))
        .filter(sim_resources::kind.eq(GPU))
        .select((sim_resources::name, sim_resources::instance_id))
        .load(conn)?;
    let change = plan_gpus(&rows, job).map_err(|reason| fail(Step::BindGpus, &reason))?;
    if !change.drop.is_empty() {
        diesel::delete(
            sim_resources::table
                .filter(sim_resources::machine_id.eq(job.machine_id))
                .filter(sim_resources::instance_id.eq(job.instance_id))
                .filter(sim_resources::kind.eq(GPU))
                .filter(sim_resources::name.eq_any(&change.drop)),
        )
        .execute(conn)?;
    }
    for name in change.add {
        add(conn, job, GPU, name)?;
    }
    // Loud, so the step is retried, should a name still have been taken.
    let bound = held(conn, job.machine_id, job.instance_id, GPU)?;
    gpus_bound(&bound, job).map_err(|reason| fail(Step::BindGpus, &reason))
}

/// Ready means: exactly the allocated GPUs (or slice) bound, a network, a
/// volume, a running container, and the renter's key authorised when one
/// was given.
fn readiness(conn: &mut PgConnection, job: &ProvisionInstance) -> Result<(), Error> {
    let gpus = held(conn, job.machine_id, job.instance_id, GPU)?;
    gpus_bound(&gpus, job).map_err(|reason| fail(Step::ReadinessCheck, &reason))?;
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
                            .filter(sim_resources::kind.eq_any([GPU, "container"]))
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
    use contracts::ids::{OrderId, TenantId};
    use std::sync::Arc;

    fn job(machine: Uuid, gpu_count: i32) -> ProvisionInstance {
        ProvisionInstance {
            instance_id: InstanceId(Uuid::now_v7()),
            order_id: OrderId(Uuid::now_v7()),
            tenant_id: TenantId(Uuid::now_v7()),
            machine_id: MachineId(machine),
            gpu_count,
            machine_gpu_count: 2,
            image: "nvidia/cuda:12.4.1-runtime-ubuntu22.04".into(),
            ssh_public_key: None,
            command: None,
            env: Default::default(),
            ports: Vec::new(),
            disk_gib: None,
            gpu_indices: Vec::new(),
            mig: None,
        }
    }

    fn indices(machine: Uuid, indices: &[u32]) -> ProvisionInstance {
        ProvisionInstance {
            gpu_indices: indices.to_vec(),
            ..job(machine, indices.len() as i32)
        }
    }

    fn slice(machine: Uuid, gpu_index: u32, start: u8, size: u8) -> ProvisionInstance {
        ProvisionInstance {
            mig: Some(MigSlice {
                profile: if size == 4 { "3g.40gb" } else { "1g.10gb" }.into(),
                gpu_index,
                start,
                size,
                nvml_profile: 0,
            }),
            ..job(machine, 1)
        }
    }

    fn rows(held: &[(&str, &ProvisionInstance)]) -> Vec<(String, Uuid)> {
        held.iter()
            .map(|(name, job)| ((*name).to_owned(), job.instance_id.into()))
            .collect()
    }

    #[test]
    fn slices_and_indices_follow_the_placement_rules() {
        let m = Uuid::now_v7();
        let a = slice(m, 0, 0, 4);
        let whole = indices(m, &[1]);
        let held = rows(&[("gpu0:0+4", &a), ("1", &whole)]);
        // Beside a's slice: added; a again: nothing to do.
        let b = slice(m, 0, 4, 4);
        assert_eq!(
            plan_gpus(&held, &b).unwrap(),
            Change {
                add: vec!["gpu0:4+4".into()],
                drop: vec![],
            }
        );
        assert_eq!(plan_gpus(&held, &a).unwrap(), Change::default());
        // On a's memory slices, or on a GPU bound whole, or off the GPU.
        let overlap = plan_gpus(&held, &slice(m, 0, 3, 1)).unwrap_err();
        assert!(overlap.contains("overlaps"), "{overlap}");
        let on_whole = plan_gpus(&held, &slice(m, 1, 0, 1)).unwrap_err();
        assert!(on_whole.contains("bound whole"), "{on_whole}");
        assert!(plan_gpus(&held, &slice(m, 0, 6, 4)).is_err());
        assert!(plan_gpus(&held, &slice(m, 2, 0, 1)).is_err());
        // Whole GPUs: not one holding a slice, not one bound, not twice.
        assert!(
            plan_gpus(&held, &indices(m, &[0]))
                .unwrap_err()
                .contains("MIG slice")
        );
        assert!(
            plan_gpus(&held, &indices(m, &[1]))
                .unwrap_err()
                .contains("bound to another")
        );
        assert!(plan_gpus(&[], &indices(m, &[1, 1])).is_err());
        assert!(plan_gpus(&[], &indices(m, &[2])).is_err());
        // A job from an earlier release gets a free GPU: none here.
        assert!(plan_gpus(&held, &job(m, 1)).is_err());
        assert_eq!(
            plan_gpus(&rows(&[("gpu0:0+4", &a)]), &job(m, 1)).unwrap(),
            Change {
                add: vec!["1".into()],
                drop: vec![],
            }
        );
        // What an instance held of an earlier allocation is dropped.
        let moved = ProvisionInstance {
            instance_id: a.instance_id,
            ..indices(m, &[0])
        };
        assert_eq!(
            plan_gpus(&held, &moved).unwrap(),
            Change {
                add: vec!["0".into()],
                drop: vec!["gpu0:0+4".into()],
            }
        );
        assert_eq!(
            parse_held("gpu1:2+2"),
            Some(Held::Slice {
                gpu: 1,
                mask: 0b1100
            })
        );
        assert_eq!(parse_held("3"), Some(Held::Whole(3)));
        assert_eq!(parse_held("gpu1:2"), None);
    }

    #[test]
    fn readiness_wants_exactly_the_allocation() {
        let m = Uuid::now_v7();
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(gpus_bound(&names(&["gpu0:4+4"]), &slice(m, 0, 4, 4)).is_ok());
        assert!(gpus_bound(&names(&["0"]), &slice(m, 0, 4, 4)).is_err());
        assert!(gpus_bound(&names(&["1", "0"]), &indices(m, &[0, 1])).is_ok());
        assert!(gpus_bound(&names(&["0", "2"]), &indices(m, &[0, 1])).is_err());
        assert!(gpus_bound(&names(&["1"]), &job(m, 1)).is_ok());
        assert!(gpus_bound(&names(&[]), &job(m, 1)).is_err());
    }

    /// Against a database of its own: binds, overlapping binds racing,
    /// readiness, stop, unbind and validation, through the driver.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn slices_are_bound_once_raced_safely_and_released_like_gpus() {
        let test_db = platform::test_db::TestDb::new("sim_mig").unwrap();
        let driver = Arc::new(SimulatedDriver {
            db: Db::connect(&test_db.url, 8).unwrap(),
            latency: HashMap::new(),
            failures: Mutex::new(HashMap::new()),
            traffic_bytes_per_second: 0,
        });
        let m = Uuid::now_v7();
        let count = |kind: &'static str| {
            let driver = driver.clone();
            async move {
                driver
                    .db
                    .run(move |conn| {
                        sim_resources::table
                            .filter(sim_resources::machine_id.eq(m))
                            .filter(sim_resources::kind.eq(kind))
                            .select(sim_resources::name)
                            .load::<String>(conn)
                            .map_err(Error::from)
                    })
                    .await
                    .unwrap()
            }
        };
        // Every connection open first, so the binds below start together
        // rather than one per new connection.
        let warm: Vec<_> = (0..8)
            .map(|_| {
                let driver = driver.clone();
                tokio::spawn(async move {
                    driver
                        .db
                        .run(|conn| {
                            diesel::sql_query("SELECT pg_sleep(0.05)")
                                .execute(conn)
                                .map_err(Error::from)
                        })
                        .await
                })
            })
            .collect();
        for handle in warm {
            handle.await.unwrap().unwrap();
        }
        // Slices of every size all over GPU 0, bound at once: those bound
        // share no memory slice.
        let racers: Vec<ProvisionInstance> = [
            (0, 8),
            (0, 4),
            (4, 4),
            (0, 2),
            (2, 2),
            (4, 2),
            (6, 2),
            (0, 1),
            (1, 1),
            (2, 1),
            (3, 1),
            (5, 1),
        ]
        .into_iter()
        .map(|(start, size)| slice(m, 0, start, size))
        .collect();
        let handles: Vec<_> = racers
            .iter()
            .cloned()
            .map(|job| {
                let driver = driver.clone();
                tokio::spawn(async move { driver.run_step(Step::BindGpus, &job).await })
            })
            .collect();
        let mut won = Vec::new();
        for (job, handle) in racers.iter().zip(handles) {
            if handle.await.unwrap().is_ok() {
                won.push(job.clone());
            }
        }
        let bound = count(GPU).await;
        assert_eq!(bound.len(), won.len());
        let mut held: Mask = 0;
        for job in &won {
            let mask = job.mig.as_ref().map_or(0, MigSlice::mask);
            assert_eq!(held & mask, 0, "overlapping slices bound: {bound:?}");
            held |= mask;
        }
        assert!(!won.is_empty());
        // Keep one, release the others (as their deprovisioning would).
        let winner = &won[0];
        for job in &won[1..] {
            let gone = DeprovisionInstance {
                instance_id: job.instance_id,
                machine_id: MachineId(m),
                tenant_id: job.tenant_id,
            };
            driver
                .deprovision_step(Step::UnbindGpus, &gone)
                .await
                .unwrap();
        }
        assert_eq!(count(GPU).await.len(), 1);
        // Redelivered: nothing changes. GPU 0 cannot be bound whole; GPU 1 can.
        driver.run_step(Step::BindGpus, winner).await.unwrap();
        assert_eq!(count(GPU).await.len(), 1);
        assert!(
            driver
                .run_step(Step::BindGpus, &indices(m, &[0]))
                .await
                .is_err()
        );
        let whole = indices(m, &[1]);
        driver.run_step(Step::BindGpus, &whole).await.unwrap();
        // ... and then GPU 1 takes no slice.
        assert!(
            driver
                .run_step(Step::BindGpus, &slice(m, 1, 0, 1))
                .await
                .is_err()
        );
        // Readiness sees the slice (with the rest of the instance).
        for step in [
            Step::AttachNetwork,
            Step::CreateVolume,
            Step::StartContainer,
        ] {
            driver.run_step(step, winner).await.unwrap();
        }
        driver.run_step(Step::ReadinessCheck, winner).await.unwrap();
        // A stop releases the slice like a GPU bind, as does deprovisioning;
        // validation then finds nothing of it.
        let stop = StopInstance {
            instance_id: winner.instance_id,
            machine_id: MachineId(m),
        };
        driver
            .stop(&stop, Utc::now() + chrono::Duration::seconds(1))
            .await
            .unwrap();
        assert_eq!(count(GPU).await, vec!["1".to_owned()]);
        driver.run_step(Step::BindGpus, winner).await.unwrap();
        let deprovision = DeprovisionInstance {
            instance_id: winner.instance_id,
            machine_id: MachineId(m),
            tenant_id: winner.tenant_id,
        };
        assert!(
            driver
                .deprovision_step(Step::ValidateClean, &deprovision)
                .await
                .is_err()
        );
        for step in [
            Step::StopContainer,
            Step::UnbindGpus,
            Step::DetachNetwork,
            Step::WipeVolume,
        ] {
            driver.deprovision_step(step, &deprovision).await.unwrap();
        }
        driver
            .deprovision_step(Step::ValidateClean, &deprovision)
            .await
            .unwrap();
        // Its memory slices are free: the whole of GPU 0 can be sliced again.
        driver
            .run_step(Step::BindGpus, &slice(m, 0, 0, 8))
            .await
            .unwrap();
    }

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

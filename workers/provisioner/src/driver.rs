//! The steps of the service model and the driver that carries them out.

use chrono::{DateTime, Utc};
use contracts::events::{DeprovisionInstance, ProvisionInstance, ProvisionRun, StopInstance};

use crate::Error;

/// Boxed futures keep the trait object-safe without an extra crate.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// What it takes to give a renter a usable GPU environment, in order
/// ([`Step::PROVISION`]; the result is user-ready — SSH works, GPUs visible —
/// not "task finished"), and to take it off the machine again
/// ([`Step::DEPROVISION`], which ends by validating the machine clean).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    ValidateHost,
    PullImage,
    BindGpus,
    AttachNetwork,
    CreateVolume,
    StartContainer,
    AuthorizeSsh,
    ReadinessCheck,
    RevokeSsh,
    StopContainer,
    UnbindGpus,
    DetachNetwork,
    WipeVolume,
    ValidateClean,
    /// The one step of a stop job: unbind the GPUs and container of a stopped
    /// instance ([`Driver::stop`]).
    StopInstance,
}

impl Step {
    pub const PROVISION: [Step; 8] = [
        Step::ValidateHost,
        Step::PullImage,
        Step::BindGpus,
        Step::AttachNetwork,
        Step::CreateVolume,
        Step::StartContainer,
        Step::AuthorizeSsh,
        Step::ReadinessCheck,
    ];

    /// Credentials first (the renter loses access at once), tenant data wiped
    /// before the machine is declared clean.
    pub const DEPROVISION: [Step; 6] = [
        Step::RevokeSsh,
        Step::StopContainer,
        Step::UnbindGpus,
        Step::DetachNetwork,
        Step::WipeVolume,
        Step::ValidateClean,
    ];

    pub const STOP: [Step; 1] = [Step::StopInstance];

    pub const ALL: [Step; 15] = [
        Step::ValidateHost,
        Step::PullImage,
        Step::BindGpus,
        Step::AttachNetwork,
        Step::CreateVolume,
        Step::StartContainer,
        Step::AuthorizeSsh,
        Step::ReadinessCheck,
        Step::RevokeSsh,
        Step::StopContainer,
        Step::UnbindGpus,
        Step::DetachNetwork,
        Step::WipeVolume,
        Step::ValidateClean,
        Step::StopInstance,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Step::ValidateHost => "validate_host",
            Step::PullImage => "pull_image",
            Step::BindGpus => "bind_gpus",
            Step::AttachNetwork => "attach_network",
            Step::CreateVolume => "create_volume",
            Step::StartContainer => "start_container",
            Step::AuthorizeSsh => "authorize_ssh",
            Step::ReadinessCheck => "readiness_check",
            Step::RevokeSsh => "revoke_ssh",
            Step::StopContainer => "stop_container",
            Step::UnbindGpus => "unbind_gpus",
            Step::DetachNetwork => "detach_network",
            Step::WipeVolume => "wipe_volume",
            Step::ValidateClean => "validate_clean",
            Step::StopInstance => "stop_instance",
        }
    }

    pub fn parse(s: &str) -> Option<Step> {
        Step::ALL.into_iter().find(|step| step.as_str() == s)
    }
}

/// Carries out steps on a machine. Every step must be idempotent: after a
/// crash the step that was in flight runs again.
pub trait Driver: Send + Sync {
    /// One of [`Step::PROVISION`].
    fn run_step<'a>(
        &'a self,
        step: Step,
        job: &'a ProvisionInstance,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// One of [`Step::PROVISION`] for one attempt of the instance. A driver
    /// that hands the whole run to someone else (the host agent reads the
    /// attempt as the run its containers belong to) overrides it.
    fn run_attempt_step<'a>(
        &'a self,
        step: Step,
        run: &'a ProvisionRun,
    ) -> BoxFuture<'a, Result<(), Error>> {
        self.run_step(step, &run.instance)
    }

    /// One of [`Step::DEPROVISION`]. `ValidateClean` must fail while anything
    /// of the instance remains on the machine.
    fn deprovision_step<'a>(
        &'a self,
        step: Step,
        job: &'a DeprovisionInstance,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// Unbinds a stopped instance's GPUs and container; the volume stays.
    /// Only what was bound before `issued_at` (when the stop was decided) is
    /// undone, so a stop handled late cannot unbind the GPUs of a start that
    /// followed it.
    fn stop<'a>(
        &'a self,
        command: &'a StopInstance,
        issued_at: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<(), Error>>;
}

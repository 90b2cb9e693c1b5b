//! The steps of the service model and the driver that carries them out.

use contracts::events::{ProvisionInstance, StopInstance};

use crate::Error;

/// Boxed futures keep the trait object-safe without an extra crate.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// What it takes to give a renter a usable GPU environment, in order. The
/// result is user-ready (SSH works, GPUs visible), not "task finished".
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
}

impl Step {
    pub const ALL: [Step; 8] = [
        Step::ValidateHost,
        Step::PullImage,
        Step::BindGpus,
        Step::AttachNetwork,
        Step::CreateVolume,
        Step::StartContainer,
        Step::AuthorizeSsh,
        Step::ReadinessCheck,
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
        }
    }

    pub fn parse(s: &str) -> Option<Step> {
        Step::ALL.into_iter().find(|step| step.as_str() == s)
    }
}

/// Carries out steps on a machine. Every step must be idempotent: after a
/// crash the step that was in flight runs again.
pub trait Driver: Send + Sync {
    fn run_step<'a>(
        &'a self,
        step: Step,
        job: &'a ProvisionInstance,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// Unbinds a stopped instance's GPUs and container; the volume stays.
    fn stop<'a>(&'a self, command: &'a StopInstance) -> BoxFuture<'a, Result<(), Error>>;
}

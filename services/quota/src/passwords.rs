//! Password hashing (argon2id with the crate's defaults: 19 MiB, 2 passes,
//! 1 lane) on a few dedicated threads.
//!
//! Each argon2 call needs a 19 MiB work area. Run on tokio's blocking pool,
//! every call allocated its own, on whichever of up to 512 blocking threads
//! took it: a burst of sign-ups held one work area per concurrent call, and
//! the allocator kept much of that memory afterwards (a per-thread arena
//! each). Here at most [`MAX_THREADS`] threads, and at most one per CPU, do
//! all the hashing; each allocates its work area at its first job and keeps
//! it, so hashing never holds more than `threads × 19 MiB`. Calls beyond
//! the threads wait their turn in a queue, as they would have waited for a
//! CPU anyway.
//!
//! Only sign-up, login and operator creation hash. Requests authenticate
//! with a JWT (verified in the gateway) or an API key (SHA-256, see
//! `api_keys`): argon2 is never on the per-request path.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{Output, ParamsString, PasswordHash, Salt, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use tokio::sync::oneshot;

use crate::Error;

/// The most hashing threads, whatever the CPU count.
pub const MAX_THREADS: usize = 4;

/// Hashing threads on this machine: one per CPU, at most [`MAX_THREADS`].
pub fn threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, MAX_THREADS)
}

enum Job {
    Hash {
        password: String,
        reply: oneshot::Sender<Result<String, String>>,
    },
    Verify {
        password: String,
        hash: String,
        reply: oneshot::Sender<bool>,
    },
}

/// The queue of the hashing threads, started at the first call.
fn queue() -> &'static Mutex<mpsc::Sender<Job>> {
    static QUEUE: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    QUEUE.get_or_init(|| {
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        for n in 0..threads() {
            let receiver = receiver.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("argon2-{n}"))
                .spawn(move || work(&receiver));
            if let Err(error) = spawned {
                tracing::error!(%error, "could not start a password hashing thread");
            }
        }
        Mutex::new(sender)
    })
}

fn submit(job: Job) -> Result<(), Error> {
    queue()
        .lock()
        .map_err(|_| Error::Hashing("hashing queue poisoned".into()))?
        .send(job)
        .map_err(|_| Error::Hashing("no hashing thread".into()))
}

/// Hashes a new password (PHC string, random salt).
pub async fn hash(password: String) -> Result<String, Error> {
    let (reply, answer) = oneshot::channel();
    submit(Job::Hash { password, reply })?;
    answer
        .await
        .map_err(|_| Error::Hashing("hashing thread ended".into()))?
        .map_err(Error::Hashing)
}

/// Whether `password` matches the stored PHC `hash`.
pub async fn verify(password: String, hash: String) -> Result<bool, Error> {
    let (reply, answer) = oneshot::channel();
    submit(Job::Verify {
        password,
        hash,
        reply,
    })?;
    answer
        .await
        .map_err(|_| Error::Hashing("hashing thread ended".into()))
}

/// One hashing thread: takes jobs until the queue is gone.
fn work(jobs: &Mutex<mpsc::Receiver<Job>>) {
    let mut memory: Vec<Block> = Vec::new();
    loop {
        // The lock is held only while waiting for the next job.
        let job = match jobs.lock() {
            Ok(receiver) => receiver.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        if memory.is_empty() {
            memory = vec![Block::default(); Params::default().block_count()];
        }
        match job {
            Job::Hash { password, reply } => {
                let _ = reply.send(hash_with(&mut memory, password.as_bytes()));
            }
            Job::Verify {
                password,
                hash,
                reply,
            } => {
                let _ = reply.send(verify_with(&mut memory, password.as_bytes(), &hash));
            }
        }
    }
}

/// argon2's output for `password` and `salt` under `argon2`'s parameters,
/// in `memory` when it is large enough (always, for this service's own
/// hashes), else in a work area of its own for this call.
fn output(
    argon2: &Argon2<'_>,
    memory: &mut [Block],
    password: &[u8],
    salt: Salt<'_>,
) -> argon2::password_hash::Result<Output> {
    let mut salt_bytes = [0u8; 64];
    let salt_bytes = salt.decode_b64(&mut salt_bytes)?;
    let params = argon2.params();
    let blocks = params.block_count();
    Output::init_with(
        params.output_len().unwrap_or(Params::DEFAULT_OUTPUT_LEN),
        |out| {
            Ok(match memory.get_mut(..blocks) {
                Some(area) => {
                    argon2.hash_password_into_with_memory(password, salt_bytes, out, area)
                }
                None => argon2.hash_password_into(password, salt_bytes, out),
            }?)
        },
    )
}

/// What `Argon2::default().hash_password` gives, computed in `memory`.
pub(crate) fn hash_with(memory: &mut [Block], password: &[u8]) -> Result<String, String> {
    let salt = SaltString::generate(&mut OsRng);
    let argon2 = Argon2::default();
    let output = output(&argon2, memory, password, salt.as_salt()).map_err(|e| e.to_string())?;
    let hash = PasswordHash {
        algorithm: Algorithm::default().ident(),
        version: Some(Version::default().into()),
        params: ParamsString::try_from(argon2.params()).map_err(|e| e.to_string())?,
        salt: Some(salt.as_salt()),
        hash: Some(output),
    };
    Ok(hash.to_string())
}

/// What `Argon2::default().verify_password` answers, computed in `memory`:
/// the stored hash's own algorithm, version and parameters, and a
/// constant-time comparison (`Output`'s equality). A malformed hash never
/// matches.
pub(crate) fn verify_with(memory: &mut [Block], password: &[u8], hash: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(hash) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return false;
    };
    let argon2 = match (
        Algorithm::try_from(parsed.algorithm),
        parsed.version.map(Version::try_from).transpose(),
        Params::try_from(&parsed),
    ) {
        (Ok(algorithm), Ok(version), Ok(params)) => {
            Argon2::new(algorithm, version.unwrap_or_default(), params)
        }
        _ => return false,
    };
    output(&argon2, memory, password, salt).is_ok_and(|computed| computed == expected)
}

#[cfg(test)]
mod tests {
    use argon2::{PasswordHasher, PasswordVerifier};

    use super::*;

    fn area() -> Vec<Block> {
        vec![Block::default(); Params::default().block_count()]
    }

    #[test]
    fn hashes_are_the_crates_own_both_ways() {
        let mut memory = area();
        let ours = hash_with(&mut memory, b"correct horse").unwrap();
        assert!(
            ours.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{ours}"
        );
        let parsed = PasswordHash::new(&ours).unwrap();
        assert!(
            Argon2::default()
                .verify_password(b"correct horse", &parsed)
                .is_ok()
        );
        // The same work area again, dirty from the last call.
        let theirs = Argon2::default()
            .hash_password(b"correct horse", &SaltString::generate(&mut OsRng))
            .unwrap()
            .to_string();
        assert!(verify_with(&mut memory, b"correct horse", &theirs));
        assert!(!verify_with(&mut memory, b"wrong horse", &theirs));
        assert!(verify_with(&mut memory, b"correct horse", &ours));
        assert!(!verify_with(&mut memory, b"correct horse", "not a hash"));
    }

    #[test]
    fn other_parameters_verify_in_a_smaller_or_larger_area() {
        for (m, t, p) in [(1024, 1, 1), (32768, 1, 2)] {
            let params = Params::new(m, t, p, None).unwrap();
            let hasher = Argon2::new(Algorithm::Argon2id, Version::V0x13, params);
            let hash = hasher
                .hash_password(b"pw", &SaltString::generate(&mut OsRng))
                .unwrap()
                .to_string();
            let mut memory = area();
            assert!(verify_with(&mut memory, b"pw", &hash), "{hash}");
            assert!(!verify_with(&mut memory, b"px", &hash), "{hash}");
        }
    }

    #[tokio::test]
    async fn the_threads_hash_and_verify() {
        let hash = super::hash("hunter22".into()).await.unwrap();
        assert!(verify("hunter22".into(), hash.clone()).await.unwrap());
        assert!(!verify("hunter23".into(), hash).await.unwrap());
        assert!((1..=MAX_THREADS).contains(&threads()));
    }
}

//! Runs rentals as containers through the Docker Engine API (Docker, or
//! Podman's compatible service): the real [`crate::Executor`].

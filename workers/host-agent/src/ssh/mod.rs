//! The SSH gateway: renters log in to their instance's container without an
//! sshd in the image; sessions run through the engine's exec API.

//! What a request must stay within, as async-graphql extensions: the
//! [`guards`] refuse it before it is parsed, the [`limits`] bound its depth,
//! its cost and how many expensive requests a caller runs at once, and put
//! parser and validation errors in plain words; [`numbers`] is the guard
//! against inexact decimal literals.

pub mod guards;
pub mod limits;
pub mod numbers;

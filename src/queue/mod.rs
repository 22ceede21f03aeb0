//! The queue: the pure admission decision and the controller that applies it.

pub mod admission;
pub mod at_creation;
pub mod controller;
pub mod resources;
pub mod snapshot;
mod writer;

/// The admission pass before its rewrite, kept to check and measure the rewrite against.
#[doc(hidden)]
pub mod admission_reference;
#[cfg(test)]
mod admission_tests;

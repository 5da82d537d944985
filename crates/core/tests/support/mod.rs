//! Shared by the integration tests: reference models and the window-bound checker.
#![allow(dead_code)]

pub mod model;
pub mod window;

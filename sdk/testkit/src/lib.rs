//! What Interlock's own tests and harnesses stand on, kept out of the library users link: scripted
//! faults at the gate's named points, and an in-process payments service that behaves the way
//! Stripe's refunds are documented to.

pub mod faults;
pub mod sim;

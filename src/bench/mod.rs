//! `hetero bench`'s measurements: the offload strategies run end to end
//! ([`strategy`]), the bandwidths of the floor ([`bandwidth`], [`floor`])
//! and the report ([`report`]).

pub mod bandwidth;
pub mod floor;
pub mod report;
pub mod strategy;

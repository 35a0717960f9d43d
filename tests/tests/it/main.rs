//! The integration tests of `tests`, one binary with a module per scenario file.

mod common;

mod chaos;
mod daemonset;
mod doctor;
mod faults;
mod fragment;
mod imds_lag;
mod inputs;
mod ipv6;
mod kube;
mod kube_aware;
mod kube_cluster;
mod kube_ipv6;
mod kube_services;
mod log_rotation;
mod lost_answers;
mod operator;
mod pool;
mod restart;
mod runtimes;
mod verbs;
mod vpc;
mod vpc_box;

//! How much like EC2 an [`super::Account`] behaves: latencies, request buckets, IMDS lag.

use std::time::Duration;

use cloud::Action;

/// EC2's account-wide request buckets: (burst, refill per second) of each Describe* API and of
/// each mutating API (the figures `cloud::throttle` stays well under).
pub const DESCRIBE_BUCKET: (u32, f64) = (100, 20.0);
/// See [`DESCRIBE_BUCKET`].
pub const MUTATE_BUCKET: (u32, f64) = (200, 5.0);

/// How far each instance's IMDS lags EC2 in [`Options::ec2_like`].
pub const IMDS_LAG: Duration = Duration::from_secs(2);

/// How long EC2 takes to answer, by action: tens of milliseconds to assign addresses, seconds
/// to attach an ENI (the attachment is usable only once it completes).
pub fn ec2_latency(action: Action) -> Duration {
    Duration::from_millis(match action {
        Action::AttachNetworkInterface => 2_000,
        Action::CreateNetworkInterface => 300,
        Action::DetachNetworkInterface | Action::DeleteNetworkInterface => 500,
        Action::AssignPrivateIpAddresses | Action::UnassignPrivateIpAddresses => 50,
        _ => 100,
    })
}

/// Burst and refill per second of each kind of bucket; one bucket per action, as EC2 has.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Buckets {
    /// Each Describe* action's bucket.
    pub describe: (u32, f64),
    /// Each mutating action's bucket.
    pub mutate: (u32, f64),
}

/// What stands between a caller and the model.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The time each EC2 call takes before it is answered; `None` answers at once.
    pub latency: Option<fn(Action) -> Duration>,
    /// EC2's request buckets; `None` never refuses a call for the rate.
    pub buckets: Option<Buckets>,
    /// How far IMDS lags EC2.
    pub imds_lag: Duration,
    /// The time an IMDS read takes.
    pub imds_latency: Duration,
    /// Keeps a log of every call ([`super::Account::calls`]); off where calls are many.
    pub log_calls: bool,
}

impl Options {
    /// Answers at once, never throttles, IMDS up to date, every call logged: for tests.
    pub fn instant() -> Self {
        Options {
            latency: None,
            buckets: None,
            imds_lag: Duration::ZERO,
            imds_latency: Duration::ZERO,
            log_calls: true,
        }
    }

    /// EC2 as an account sees it: latencies, request buckets, IMDS a little behind; calls are
    /// counted ([`super::Account::tally`]) but not logged.
    pub fn ec2_like() -> Self {
        Options {
            latency: Some(ec2_latency),
            buckets: Some(Buckets {
                describe: DESCRIBE_BUCKET,
                mutate: MUTATE_BUCKET,
            }),
            imds_lag: IMDS_LAG,
            // IMDS answers in about a millisecond and is never throttled.
            imds_latency: Duration::from_millis(1),
            log_calls: false,
        }
    }
}

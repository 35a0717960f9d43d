//! Waiting for a node's pool to settle: the one way the tests tell that ipamd has finished
//! growing or shrinking.

use std::time::{Duration, Instant};

use serde_json::Value;

pub use ipamd::CONTROLLER_PERIOD;

use crate::{INTROSPECT, Node};

/// The bound on a wait for a pool to settle: long enough for ENIs to be attached and set up,
/// and for a released ENI to go.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(120);

impl Node {
    /// ipamd's `/v1/pool`.
    pub fn pool(&self) -> Value {
        self.get_json(&format!("{INTROSPECT}/v1/pool"))
    }

    /// Waits (bounded by [`SETTLE_TIMEOUT`]) until ipamd plans nothing (`NextAction` is null),
    /// EC2 has not throttled it within the last minute (`Ec2Congested`: its warm targets wait
    /// until then), and neither that nor the pool's totals have changed for at least one
    /// [`CONTROLLER_PERIOD`]: the controller looks at the pool once a period, so a shorter
    /// quiet spell may only be the pause between two of its rounds. Returns the settled
    /// `/v1/pool`.
    pub fn quiesce(&self) -> Value {
        let mut seen = Value::Null;
        let mut since = Instant::now();
        let what = format!("the pool of {} to settle", self.netns);
        testkit::wait_ok(SETTLE_TIMEOUT, &what, || {
            let pool = self.pool();
            let state = serde_json::json!([pool["Totals"], pool["NextAction"]]);
            if state != seen {
                (seen, since) = (state, Instant::now());
            }
            if !pool["NextAction"].is_null() {
                Err(format!("ipamd plans {}", pool["NextAction"]))
            } else if pool["Ec2Congested"] == true {
                // The warm targets wait out a minute after EC2's last throttling.
                Err("EC2 throttled ipamd lately: the pool grows only for waiting pods".into())
            } else if since.elapsed() < CONTROLLER_PERIOD {
                Err(format!("still for only {:?}: {seen}", since.elapsed()))
            } else {
                Ok(pool)
            }
        })
    }
}

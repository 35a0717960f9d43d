//! One instance's IMDS: the model's lagged view of it.

use std::sync::Arc;

use cloud::{CloudError, Imds};

use super::Account;

/// One instance's IMDS.
#[derive(Clone)]
pub struct NodeImds {
    account: Arc<Account>,
    instance: String,
}

impl NodeImds {
    /// The IMDS of `instance` in `account`.
    pub fn new(account: &Arc<Account>, instance: &str) -> Self {
        NodeImds {
            account: Arc::clone(account),
            instance: instance.to_string(),
        }
    }
}

impl Imds for NodeImds {
    async fn get(&self, path: &str) -> Result<Option<String>, CloudError> {
        let options = self.account.options();
        if !options.imds_latency.is_zero() {
            tokio::time::sleep(options.imds_latency).await;
        }
        let now_ms = self.account.now_ms();
        let lag = u64::try_from(options.imds_lag.as_millis()).unwrap_or(u64::MAX);
        let view = self
            .account
            .with_model(|m| m.imds_view(&self.instance, now_ms, lag));
        Ok(view.and_then(|v| crate::imds::tree::resolve(&v, path, now_ms)))
    }
}

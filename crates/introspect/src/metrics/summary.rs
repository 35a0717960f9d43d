//! A summary without quantiles (only `_sum` and `_count`), as the Go CNI's
//! `awscni_aws_api_latency_ms` is: the tikv crate encodes summaries but has no summary
//! metric, so this is a small collector.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType, Summary};

#[derive(Debug)]
struct Inner {
    desc: Desc,
    label_names: Vec<String>,
    /// Label values (in `label_names` order) -> (count, sum).
    series: Mutex<BTreeMap<Vec<String>, (u64, f64)>>,
}

/// A labelled summary of counts and sums. Clones share their series.
#[derive(Clone, Debug)]
pub struct SummaryVec(Arc<Inner>);

impl SummaryVec {
    /// A summary named `name` with these label names.
    pub fn new(name: &str, help: &str, label_names: &[&str]) -> prometheus::Result<Self> {
        let label_names: Vec<String> = label_names.iter().map(|s| s.to_string()).collect();
        let desc = Desc::new(
            name.to_string(),
            help.to_string(),
            label_names.clone(),
            HashMap::new(),
        )?;
        Ok(SummaryVec(Arc::new(Inner {
            desc,
            label_names,
            series: Mutex::new(BTreeMap::new()),
        })))
    }

    /// Records `value` in the series with these label values (in label-name order).
    pub fn observe(&self, label_values: &[&str], value: f64) {
        let key: Vec<String> = label_values.iter().map(|s| s.to_string()).collect();
        let mut series = self.0.series.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = series.entry(key).or_insert((0, 0.0));
        entry.0 += 1;
        entry.1 += value;
    }
}

impl Collector for SummaryVec {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.0.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let series = self.0.series.lock().unwrap_or_else(PoisonError::into_inner);
        let metrics = series
            .iter()
            .map(|(values, (count, sum))| {
                let labels = self
                    .0
                    .label_names
                    .iter()
                    .zip(values)
                    .map(|(name, value)| {
                        let mut pair = LabelPair::default();
                        pair.set_name(name.clone());
                        pair.set_value(value.clone());
                        pair
                    })
                    .collect();
                let mut summary = Summary::default();
                summary.set_sample_count(*count);
                summary.set_sample_sum(*sum);
                let mut metric = Metric::from_label(labels);
                metric.set_summary(summary);
                metric
            })
            .collect();
        let mut family = MetricFamily::default();
        family.set_name(self.0.desc.fq_name.clone());
        family.set_help(self.0.desc.help.clone());
        family.set_field_type(MetricType::SUMMARY);
        family.set_metric(metrics);
        vec![family]
    }
}

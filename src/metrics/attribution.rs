//! Attribution families: which job (or, later, pod) uses each GPU, as info series to join on,
//! never as labels copied onto every family (that is what makes series churn).

use super::{Family, Kind, Read};

pub const FAMILIES: &[Family] = &[Family {
    name: "gpu_job_info",
    kind: Kind::Gauge,
    unit: "",
    help: "1 for each batch job running on the GPU, from the job mapping directory (hpc_jobs.mapping_dir); join on uuid.",
    labels: &["job"],
    read: Read::Device(|snapshot, d, s| {
        for job in snapshot.jobs.get(&d.identity.uuid).into_iter().flatten() {
            s.labelled(&[job], 1.0);
        }
    }),
}];

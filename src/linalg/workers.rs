//! ferrax's own thread pool, where XLA lends none (the C ABI, the CUDA handlers that work on
//! the host): worker threads that the cores split batches over, as XLA's pool serves the CPU
//! handlers. One fewer than the cores, since the calling thread works too.

use crate::linalg::parallel::Pool;
use std::ffi::c_void;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, OnceLock};

type Task = (unsafe extern "C" fn(*mut c_void), usize);

pub(crate) struct Workers {
    count: usize,
    jobs: Mutex<Sender<Task>>,
}

/// The process's pool, started on first use.
pub(crate) fn workers() -> &'static Workers {
    static POOL: OnceLock<Workers> = OnceLock::new();
    POOL.get_or_init(|| {
        let wanted = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
        let (sender, receiver) = channel::<Task>();
        let receiver = Arc::new(Mutex::new(receiver));
        let mut count = 0;
        for index in 0..wanted {
            let receiver = receiver.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("ferrax-{index}"))
                .spawn(move || loop {
                    // The lock is released before the task runs, so that workers run in parallel.
                    let job = match receiver.lock() {
                        Ok(jobs) => jobs.recv(),
                        Err(_) => return,
                    };
                    let Ok((task, data)) = job else { return };
                    // SAFETY: `task(data)` is what the core scheduled.
                    unsafe { task(data as *mut c_void) };
                });
            if spawned.is_err() {
                break;
            }
            count += 1;
        }
        Workers {
            count,
            jobs: Mutex::new(sender),
        }
    })
}

impl Pool for Workers {
    /// The workers and the calling thread, which drains tasks too.
    fn threads(&self) -> usize {
        self.count + 1
    }

    fn schedule(&self, task: unsafe extern "C" fn(*mut c_void), data: *mut c_void) -> bool {
        self.count > 0
            && self
                .jobs
                .lock()
                .map(|jobs| jobs.send((task, data as usize)).is_ok())
                .unwrap_or(false)
    }
}

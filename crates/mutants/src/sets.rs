//! The classic multi-limit mistakes: a key with several bandwidths (a burst, a sustained rate, a
//! quota) decided wrongly, each mutant on the real limiter's pieces, so that it deviates from the set
//! rule (docs/semantics.md, "Several bandwidths per key") in exactly one place.
//!
//! - [`ChargeInOrder`]: one single-bandwidth limiter per bandwidth, consumed one after another, as
//!   callers compose limiters that know one limit each; a denial by a later one leaves the earlier
//!   ones charged.
//! - [`smallest_wait`]: the real set limiter, reporting the wait of the bandwidth that frees first.
//! - [`one_rate`]: the real set limiter built (and reconfigured) with every bandwidth refilling at
//!   the first one's rate.
//!
//! Each holds one bandwidth per key as well (then it is the real limiter, or a chain of one), and only
//! a trace of several bandwidths shows the mistake ([`crate::traces::Family::Bandwidths`]).

use bucketproof_check::subjects::CoreSubject;
use bucketproof_limiter::{Bandwidth, Bandwidths, Config, Wait};
use bucketproof_trace::{
    Acquire, Amount, BandwidthObserved, ConfigSpec, Inspection, Observed, Setup, Subject,
    SubjectError,
};

fn build_error(error: impl std::fmt::Display) -> SubjectError {
    SubjectError::Build(error.to_string())
}

/// Mutant 22: the bandwidths are separate limiters consumed in order, stopping at the first denial.
/// What a caller builds from limiters that know one limit each: a request the quota denies has
/// already spent a token of the burst ("points are consumed needlessly").
pub struct ChargeInOrder {
    name: String,
    /// One real limiter of one bandwidth per bandwidth of the set, in order.
    limiters: Vec<CoreSubject>,
}

impl ChargeInOrder {
    /// One limiter per bandwidth of `setup`'s config, each built as the core subject's.
    pub fn new(name: &str, setup: &Setup) -> Result<ChargeInOrder, SubjectError> {
        let limiters = (setup.config.bandwidths().iter())
            .map(|bandwidth| {
                let mut one = setup.clone();
                one.config = ConfigSpec::set([bandwidth.clone()]);
                CoreSubject::new(&one)
            })
            .collect::<Result<_, _>>()?;
        Ok(ChargeInOrder {
            name: name.to_owned(),
            limiters,
        })
    }
}

impl Subject for ChargeInOrder {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        // The cost check of the whole set comes first (as a caller checks it against the smallest
        // limit): the mistake is in the charging, not in what is a valid request.
        let smallest = (self.limiters.iter())
            .map(|subject| subject.limiter().config_for(&acquire.key).capacity());
        if acquire.cost == 0 || smallest.min().is_some_and(|bound| acquire.cost > bound) {
            return Err(SubjectError::InvalidCost);
        }
        let mut parts = Vec::with_capacity(self.limiters.len());
        for subject in &mut self.limiters {
            let observed = subject.acquire(acquire)?;
            if !observed.allowed {
                // Denied here: the earlier limiters have charged already, the later ones were not
                // asked. The denial is reported as the whole decision, without parts.
                return Ok(observed);
            }
            parts.push(observed);
        }
        // Allowed by every one: reported as the set limiter does, the part with the fewest whole
        // tokens left (the first of equals) as the whole decision, and every part.
        let whole = |observed: &Observed| match observed.remaining {
            Amount::Exact { numer, denom } => numer / denom,
            Amount::Approx(value) => value as u128,
        };
        let binding = (parts.iter().enumerate())
            .min_by_key(|(position, part)| (whole(part), *position))
            .map(|(position, _)| position)
            .ok_or_else(|| SubjectError::Build("a set has at least one bandwidth".into()))?;
        let mut observed = parts[binding].clone();
        if parts.len() > 1 {
            observed.bandwidths = (parts.iter())
                .map(|part| BandwidthObserved {
                    remaining: part.remaining,
                    retry_after: part.retry_after,
                    reset_after: part.reset_after,
                })
                .collect();
        }
        Ok(observed)
    }

    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.limiters
            .iter_mut()
            .try_for_each(|subject| subject.forget(key))
    }

    fn sweep(&mut self, now: u64) -> Result<(), SubjectError> {
        self.limiters
            .iter_mut()
            .try_for_each(|subject| subject.sweep(now))
    }

    /// The first bandwidth's state, as a set limiter shows a key of several bandwidths.
    fn inspect(&mut self, key: u64) -> Inspection {
        self.limiters[0].inspect(key)
    }

    fn may_evict(&self) -> bool {
        true
    }
}

/// The real set limiter behind the subject interface with one mistake: in the configs it is built
/// and reconfigured with (`configure`), or in what it reports (`report`).
pub struct Wrapped {
    name: String,
    core: CoreSubject,
    configure: fn(&ConfigSpec) -> Result<ConfigSpec, SubjectError>,
    report: fn(Observed) -> Observed,
}

impl Wrapped {
    fn new(
        name: &str,
        setup: &Setup,
        configure: fn(&ConfigSpec) -> Result<ConfigSpec, SubjectError>,
        report: fn(Observed) -> Observed,
    ) -> Result<Wrapped, SubjectError> {
        let mut setup = setup.clone();
        setup.config = configure(&setup.config)?;
        Ok(Wrapped {
            name: name.to_owned(),
            core: CoreSubject::new(&setup)?,
            configure,
            report,
        })
    }
}

impl Subject for Wrapped {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn acquire(&mut self, acquire: Acquire) -> Result<Observed, SubjectError> {
        self.core.acquire(acquire).map(self.report)
    }

    fn reconfigure(&mut self, key: u64, config: &ConfigSpec, now: u64) -> Result<(), SubjectError> {
        let config = (self.configure)(config)?;
        self.core.reconfigure(key, &config, now)
    }

    fn forget(&mut self, key: u64) -> Result<(), SubjectError> {
        self.core.forget(key)
    }

    fn sweep(&mut self, now: u64) -> Result<(), SubjectError> {
        self.core.sweep(now)
    }

    fn would_allow(&mut self, acquire: Acquire) -> Option<bool> {
        self.core.would_allow(acquire)
    }

    fn inspect(&mut self, key: u64) -> Inspection {
        self.core.inspect(key)
    }

    fn may_evict(&self) -> bool {
        self.core.may_evict()
    }
}

/// Mutant 23: a denial reports the wait of the bandwidth that frees first, not of the one that frees
/// last; a client that retries then is denied again.
pub fn smallest_wait(name: &str, setup: &Setup) -> Result<Wrapped, SubjectError> {
    Wrapped::new(
        name,
        setup,
        |config| Ok(config.clone()),
        |mut observed| {
            // The smallest positive wait among the parts (a bandwidth that covers the cost waits 0).
            let waits = (observed.bandwidths.iter()).filter_map(|part| part.retry_after);
            if let Some(smallest) = waits.filter(|&wait| wait != Wait::After(0)).min() {
                observed.retry_after = Some(smallest);
            }
            observed
        },
    )
}

/// Mutant 24: every bandwidth refills at the first bandwidth's rate (one refill rate for the key,
/// each bandwidth keeping its capacity and name): a quota behind a fast burst refills as fast as the
/// burst.
pub fn one_rate(name: &str, setup: &Setup) -> Result<Wrapped, SubjectError> {
    Wrapped::new(name, setup, at_first_rate, |observed| observed)
}

fn at_first_rate(config: &ConfigSpec) -> Result<ConfigSpec, SubjectError> {
    let set = config.to_bandwidths().map_err(build_error)?;
    let rate = set.first().rate();
    let parts = (set.as_slice().iter())
        .map(|bandwidth| {
            let config = Config::new(bandwidth.config().capacity(), rate).map_err(build_error)?;
            match bandwidth.name() {
                Some(name) => Bandwidth::named(name.as_str(), config).map_err(build_error),
                None => Ok(Bandwidth::new(config)),
            }
        })
        .collect::<Result<Vec<_>, SubjectError>>()?;
    let one_rate = Bandwidths::new(parts).map_err(build_error)?;
    Ok(ConfigSpec::of_bandwidths(&one_rate))
}

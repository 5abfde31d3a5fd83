//! What one proxy table holds, kept by owner so that a partial sync costs what changed:
//! the fixed part's [`Fragment`], one per Service port (keyed by its id), and an index of
//! who contributed each element of the shared sets and maps.
//!
//! A full sync builds it from scratch ([`TableState::build`]) and loads
//! [`TableState::full_text`]; a partial one ([`TableState::update`]) re-renders only the
//! ports that changed and emits only their chains' and maps' differences and the changed
//! elements of the shared sets. Pure (no I/O); the applier owns the state and drops it on
//! any failure, so the cache can never make the kernel drift from the model.
//!
//! It also places the balancing chains in the shared endpoint maps ([`Slot`]s): a chain's
//! slot is its bucket (from its name's hash) and the first free map from its preferred one,
//! chains of a bucket taking theirs in name order. So the slots are a function of the set
//! of chains (a partial update reaches what a fresh build gives), and a chain added or
//! removed can move only chains of its own bucket (rare: 65,536 buckets), whose ports are
//! then re-rendered too.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::model::ServicePort;
use super::render::{
    ENDPOINT_MAPS, Family, Fragment, RenderOptions, Ruleset, SharedElement, Slot, Slots,
    render_base, render_port, slot_home, slot_requests, write_chain_decl, write_elements,
    write_replace_header, write_rules, write_set_decl,
};

/// The owner of the table's fixed part: sorts before every port id (never empty).
const BASE_OWNER: &str = "";

/// One changed port: its new model, or `None` when it is gone.
pub type Changes<'a> = BTreeMap<String, Option<&'a ServicePort>>;

/// Who contributed a shared element's value: (owner, value), sorted by owner. Two owners
/// setting one key (it does not happen for valid Services) resolve to the greatest
/// owner's value, so the result does not depend on the order ports come in.
type Contributions = Vec<(Arc<str>, String)>;

/// The cached content of one table (one family).
#[derive(Debug, Clone)]
pub struct TableState {
    family: Family,
    options: RenderOptions,
    base: Fragment,
    ports: BTreeMap<Arc<str>, Owned>,
    /// shared set → key → contributions.
    shared: BTreeMap<&'static str, BTreeMap<String, Contributions>>,
    /// The chains that pick from the shared endpoint maps, by bucket (a slot's `base`):
    /// chain → (its port's id, its preferred map).
    buckets: BTreeMap<u32, BTreeMap<String, (Arc<str>, usize)>>,
    /// Their slots (a chain of a full bucket has none and takes its own map).
    slots: Slots,
}

/// One Service port's part: its model (to re-render it when a chain of another port moves
/// its slot), its fragment and the chains it asked slots for.
#[derive(Debug, Clone)]
struct Owned {
    model: ServicePort,
    fragment: Fragment,
    chains: Vec<String>,
}

/// The differences between the last applied model (by port id) and `ports`: added or
/// changed ports with their new model, removed ones with `None`. The comparison is of
/// the models themselves, so it costs microseconds for a thousand ports.
pub fn port_changes<'a>(
    applied: &BTreeMap<String, ServicePort>,
    ports: &'a [ServicePort],
) -> Changes<'a> {
    let wanted: BTreeMap<String, &ServicePort> = ports.iter().map(|p| (p.id(), p)).collect();
    let mut changes = Changes::new();
    for id in applied.keys() {
        if !wanted.contains_key(id) {
            changes.insert(id.clone(), None);
        }
    }
    for (id, port) in wanted {
        if applied.get(&id) != Some(port) {
            changes.insert(id, Some(port));
        }
    }
    changes
}

impl TableState {
    /// Renders everything from scratch.
    pub fn build(family: Family, options: &RenderOptions, ports: &[ServicePort]) -> TableState {
        let mut state = TableState {
            family,
            options: options.clone(),
            base: render_base(family, options),
            ports: BTreeMap::new(),
            shared: BTreeMap::new(),
            buckets: BTreeMap::new(),
            slots: Slots::new(),
        };
        let owner: Arc<str> = Arc::from(BASE_OWNER);
        state.contribute(&owner, &state.base.shared.clone());
        // The last port of an id wins, as a later update of that id would.
        let by_id: BTreeMap<String, &ServicePort> = ports.iter().map(|p| (p.id(), p)).collect();
        let mut requested = Vec::with_capacity(by_id.len());
        for (id, port) in by_id {
            let owner: Arc<str> = Arc::from(id);
            let chains = slot_requests(family, port);
            state.request_slots(&owner, &chains);
            requested.push((owner, port, chains));
        }
        let buckets: Vec<u32> = state.buckets.keys().copied().collect();
        for bucket in buckets {
            state.assign_bucket(bucket);
        }
        for (owner, port, chains) in requested {
            let fragment = render_port(family, port, &state.slots);
            state.contribute(&owner, &fragment.shared);
            let model = port.clone();
            state.ports.insert(
                owner,
                Owned {
                    model,
                    fragment,
                    chains,
                },
            );
        }
        state
    }

    /// Files `chains` (of the port `owner`) in their buckets.
    fn request_slots(&mut self, owner: &Arc<str>, chains: &[String]) {
        for chain in chains {
            let (bucket, preferred) = slot_home(chain);
            self.buckets
                .entry(bucket)
                .or_default()
                .insert(chain.clone(), (owner.clone(), preferred));
        }
    }

    /// Takes `chains` out of their buckets and drops their slots; returns the buckets.
    fn release_slots(&mut self, chains: &[String]) -> Vec<u32> {
        let mut buckets = Vec::with_capacity(chains.len());
        for chain in chains {
            let (bucket, _) = slot_home(chain);
            if let Some(entries) = self.buckets.get_mut(&bucket) {
                entries.remove(chain);
                if entries.is_empty() {
                    self.buckets.remove(&bucket);
                }
            }
            self.slots.remove(chain);
            buckets.push(bucket);
        }
        buckets
    }

    /// (Re)assigns the slots of one bucket: its chains in name order each take the first
    /// free map from their preferred one. Returns the ports whose chains' slots changed.
    fn assign_bucket(&mut self, bucket: u32) -> BTreeSet<Arc<str>> {
        let mut moved = BTreeSet::new();
        let Some(entries) = self.buckets.get(&bucket) else {
            return moved;
        };
        let maps = pick_maps(entries.values().map(|(_, preferred)| *preferred));
        for ((chain, (owner, _)), map) in entries.iter().zip(maps) {
            let slot = map.map(|map| Slot { map, base: bucket });
            let previous = match slot {
                Some(slot) => self.slots.insert(chain.clone(), slot),
                None => self.slots.remove(chain),
            };
            if previous != slot {
                moved.insert(owner.clone());
            }
        }
        moved
    }

    pub fn family(&self) -> Family {
        self.family
    }

    /// Everything the table holds, as one ruleset.
    pub fn to_ruleset(&self) -> Ruleset {
        let mut rs = Ruleset::empty(self.family, &self.options.table);
        let fragments = self.ports.values().map(|owned| &owned.fragment);
        for fragment in std::iter::once(&self.base).chain(fragments) {
            for (name, chain) in &fragment.chains {
                rs.chains.insert(name.clone(), chain.clone());
            }
            for (name, set) in &fragment.sets {
                rs.sets.insert(name.clone(), set.clone());
            }
        }
        for (set, elements) in &self.shared {
            if let Some(target) = rs.sets.get_mut(*set) {
                for (key, contributions) in elements {
                    if let Some((_, value)) = contributions.last() {
                        target.elements.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        rs
    }

    /// The text that replaces the table with this state: what [`Ruleset::full_text`] of
    /// [`TableState::to_ruleset`] says, written owner by owner without assembling it.
    pub fn full_text(&self) -> String {
        let (family, table) = (self.family, self.options.table.as_str());
        let owners = || {
            let fragments = self.ports.values().map(|owned| &owned.fragment);
            std::iter::once(&self.base).chain(fragments)
        };
        let mut out = String::with_capacity(128 * 1024 + self.ports.len() * 1024);
        write_replace_header(&mut out, family, table);
        for (name, chain) in owners().flat_map(|f| &f.chains) {
            write_chain_decl(&mut out, family, table, name, chain);
        }
        for (name, set) in owners().flat_map(|f| &f.sets) {
            write_set_decl(&mut out, family, table, name, set);
        }
        for (name, chain) in owners().flat_map(|f| &f.chains) {
            write_rules(&mut out, family, table, name, chain);
        }
        for (name, set) in owners().flat_map(|f| &f.sets) {
            let elements = set.elements.iter();
            write_elements(
                &mut out,
                "add",
                family,
                table,
                name,
                elements.map(|(k, v)| (k.as_str(), v.as_str())),
            );
        }
        for (name, elements) in &self.shared {
            let resolved = elements.iter().filter_map(|(key, contributions)| {
                let (_, value) = contributions.last()?;
                Some((key.as_str(), value.as_str()))
            });
            write_elements(&mut out, "add", family, table, name, resolved);
        }
        out
    }

    /// Moves the state to `options` and the port `changes`, returning the text that takes
    /// the kernel's table (holding this state) there: only the changed owners' chains and
    /// sets and the shared elements whose value changed. Empty when nothing did.
    pub fn update(&mut self, options: &RenderOptions, changes: &Changes<'_>) -> String {
        let (mut old_view, mut new_view) = (self.shared_view(), self.shared_view());
        let mut removed: Vec<(Arc<str>, Vec<SharedElement>)> = Vec::new();
        let mut added: Vec<(Arc<str>, Vec<SharedElement>)> = Vec::new();
        let mut new_base = None;
        if *options != self.options {
            let base = render_base(self.family, options);
            if base != self.base {
                absorb(&mut old_view, &self.base);
                absorb(&mut new_view, &base);
                let owner: Arc<str> = Arc::from(BASE_OWNER);
                removed.push((owner.clone(), self.base.shared.clone()));
                added.push((owner, base.shared.clone()));
                new_base = Some(base);
            }
        }
        // The changed ports' chains leave their buckets and their new ones come in; the
        // buckets touched are reassigned, which may move a chain of an unchanged port too.
        let mut rerender: Vec<(Arc<str>, Option<ServicePort>, Vec<String>)> = Vec::new();
        let mut buckets = BTreeSet::new();
        for (id, port) in changes {
            let owner = match self.ports.get_key_value(id.as_str()) {
                Some((owner, owned)) => {
                    let (owner, chains) = (owner.clone(), owned.chains.clone());
                    buckets.extend(self.release_slots(&chains));
                    owner
                }
                None => Arc::from(id.as_str()),
            };
            let chains = port.map_or_else(Vec::new, |p| slot_requests(self.family, p));
            self.request_slots(&owner, &chains);
            buckets.extend(chains.iter().map(|chain| slot_home(chain).0));
            rerender.push((owner, port.cloned(), chains));
        }
        let mut moved = BTreeSet::new();
        for bucket in buckets {
            moved.extend(self.assign_bucket(bucket));
        }
        for owner in moved {
            if changes.contains_key(owner.as_ref()) {
                continue;
            }
            if let Some(owned) = self.ports.get(&owner) {
                rerender.push((owner, Some(owned.model.clone()), owned.chains.clone()));
            }
        }
        let mut replaced: Vec<(Arc<str>, Option<Owned>)> = Vec::new();
        for (owner, model, chains) in rerender {
            let new = model.map(|model| Owned {
                fragment: render_port(self.family, &model, &self.slots),
                model,
                chains,
            });
            let (old, fragment) = (
                self.ports.get(&owner).map(|o| &o.fragment),
                new.as_ref().map(|n| &n.fragment),
            );
            // An unchanged fragment still takes the new model (what it did not render may
            // have changed).
            if old != fragment {
                if let Some(fragment) = old {
                    absorb(&mut old_view, fragment);
                    removed.push((owner.clone(), fragment.shared.clone()));
                }
                if let Some(fragment) = fragment {
                    absorb(&mut new_view, fragment);
                    added.push((owner.clone(), fragment.shared.clone()));
                }
            }
            replaced.push((owner, new));
        }
        let touched: BTreeSet<(&'static str, String)> = removed
            .iter()
            .chain(&added)
            .flat_map(|(_, elements)| elements.iter().map(|(set, key, _)| (*set, key.clone())))
            .collect();
        self.fill(&mut old_view, &touched);
        for (owner, elements) in &removed {
            self.withdraw(owner, elements);
        }
        for (owner, elements) in &added {
            self.contribute(owner, elements);
        }
        self.fill(&mut new_view, &touched);
        if let Some(base) = new_base {
            self.base = base;
        }
        self.options = options.clone();
        for (owner, owned) in replaced {
            match owned {
                Some(owned) => {
                    self.ports.insert(owner, owned);
                }
                None => {
                    self.ports.remove(&owner);
                }
            }
        }
        new_view.diff_text(&old_view)
    }

    /// A ruleset with only the shared sets, declared and empty: the frame both views of a
    /// partial update share, so neither adds nor deletes them.
    fn shared_view(&self) -> Ruleset {
        let mut view = Ruleset::empty(self.family, &self.options.table);
        for (name, set) in &self.base.sets {
            let mut set = set.clone();
            set.elements.clear();
            view.sets.insert(name.clone(), set);
        }
        view
    }

    /// Puts the current resolved values of `keys` into `view`'s shared sets.
    fn fill(&self, view: &mut Ruleset, keys: &BTreeSet<(&'static str, String)>) {
        for (set, key) in keys {
            let value = self
                .shared
                .get(set)
                .and_then(|elements| elements.get(key))
                .and_then(|contributions| contributions.last());
            if let (Some((_, value)), Some(target)) = (value, view.sets.get_mut(*set)) {
                target.elements.insert(key.clone(), value.clone());
            }
        }
    }

    fn contribute(&mut self, owner: &Arc<str>, elements: &[SharedElement]) {
        for (set, key, value) in elements {
            let contributions = self
                .shared
                .entry(set)
                .or_default()
                .entry(key.clone())
                .or_default();
            match contributions.binary_search_by(|(o, _)| o.as_ref().cmp(owner.as_ref())) {
                Ok(at) => contributions[at].1 = value.clone(),
                Err(at) => contributions.insert(at, (owner.clone(), value.clone())),
            }
        }
    }

    fn withdraw(&mut self, owner: &Arc<str>, elements: &[SharedElement]) {
        for (set, key, _) in elements {
            let Some(set_elements) = self.shared.get_mut(set) else {
                continue;
            };
            if let Some(contributions) = set_elements.get_mut(key) {
                contributions.retain(|(o, _)| o != owner);
                if contributions.is_empty() {
                    set_elements.remove(key);
                }
            }
        }
    }
}

/// The maps the chains of one bucket get, in order: each the first one free from its
/// preferred map; none when all are taken.
fn pick_maps(preferred: impl Iterator<Item = usize>) -> Vec<Option<usize>> {
    let mut taken = [false; ENDPOINT_MAPS.len()];
    preferred
        .map(|preferred| {
            let map = (0..taken.len())
                .map(|i| (preferred + i) % taken.len())
                .find(|map| !taken[*map])?;
            taken[map] = true;
            Some(map)
        })
        .collect()
}

/// Adds an owner's own chains and sets to a view.
fn absorb(view: &mut Ruleset, fragment: &Fragment) {
    for (name, chain) in &fragment.chains {
        view.chains.insert(name.clone(), chain.clone());
    }
    for (name, set) in &fragment.sets {
        view.sets.insert(name.clone(), set.clone());
    }
}

/// Renders the table for `family`: the fixed part and every port, assembled as a full
/// sync does.
pub fn render(family: Family, ports: &[ServicePort], options: &RenderOptions) -> Ruleset {
    TableState::build(family, options, ports).to_ruleset()
}

#[cfg(test)]
mod tests;

//! What one proxy table holds, kept by owner so that a partial sync costs what changed:
//! the fixed part's [`Fragment`], one per Service port (keyed by its id), and an index of
//! who contributed each element of the shared sets and maps.
//!
//! A full sync builds it from scratch ([`TableState::build`]) and loads
//! [`TableState::full_text`]; a partial one ([`TableState::update`]) re-renders only the
//! ports that changed and emits only their chains' and maps' differences and the changed
//! elements of the shared sets. Pure (no I/O); the applier owns the state and drops it on
//! any failure, so the cache can never make the kernel drift from the model.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::model::ServicePort;
use super::render::{
    Family, Fragment, RenderOptions, Ruleset, SharedElement, render_base, render_port,
    write_chain_decl, write_elements, write_replace_header, write_rules, write_set_decl,
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
    ports: BTreeMap<Arc<str>, Fragment>,
    /// shared set → key → contributions.
    shared: BTreeMap<&'static str, BTreeMap<String, Contributions>>,
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
        };
        let owner: Arc<str> = Arc::from(BASE_OWNER);
        state.contribute(&owner, &state.base.shared.clone());
        // The last port of an id wins, as a later update of that id would.
        let by_id: BTreeMap<String, &ServicePort> = ports.iter().map(|p| (p.id(), p)).collect();
        for (id, port) in by_id {
            let fragment = render_port(family, port);
            let owner: Arc<str> = Arc::from(id);
            state.contribute(&owner, &fragment.shared);
            state.ports.insert(owner, fragment);
        }
        state
    }

    pub fn family(&self) -> Family {
        self.family
    }

    /// Everything the table holds, as one ruleset.
    pub fn to_ruleset(&self) -> Ruleset {
        let mut rs = Ruleset::empty(self.family, &self.options.table);
        for fragment in std::iter::once(&self.base).chain(self.ports.values()) {
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
        let owners = || std::iter::once(&self.base).chain(self.ports.values());
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
        let mut replaced: Vec<(Arc<str>, Option<Fragment>)> = Vec::new();
        for (id, port) in changes {
            let new = port.map(|p| render_port(self.family, p));
            let old = self.ports.get_key_value(id.as_str());
            if old.map(|(_, f)| f) == new.as_ref() {
                continue;
            }
            let owner = old.map_or_else(|| Arc::from(id.as_str()), |(o, _)| o.clone());
            if let Some((_, fragment)) = old {
                absorb(&mut old_view, fragment);
                removed.push((owner.clone(), fragment.shared.clone()));
            }
            if let Some(fragment) = &new {
                absorb(&mut new_view, fragment);
                added.push((owner.clone(), fragment.shared.clone()));
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
        for (owner, fragment) in replaced {
            match fragment {
                Some(fragment) => {
                    self.ports.insert(owner, fragment);
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

/// Adds an owner's own chains and sets to a view.
fn absorb(view: &mut Ruleset, fragment: &Fragment) {
    for (name, chain) in &fragment.chains {
        view.chains.insert(name.clone(), chain.clone());
    }
    for (name, set) in &fragment.sets {
        view.sets.insert(name.clone(), set.clone());
    }
}

#[cfg(test)]
mod tests;

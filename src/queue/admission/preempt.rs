//! Preemption choice within a queue: whether an item that does not fit may look for victims
//! (`withinQueue`, the floor of lower priorities, at most `MAX_PREEMPTION_ATTEMPTS` tries), the
//! holders it may take room from (`src/queue/preemption.rs` chooses among them), and the plan in
//! force for the rest of the pass once it found them.

use super::arena::{Item, ItemKind, add_into, flavor_index, to_u32};
use super::fit::Misfit;
use super::*;

impl<'a> QueuePass<'a> {
    /// Whether an item that does not fit looks for victims: the queue allows it, the item is a
    /// gang or an elastic pod (not a fill, already paid for) that could fit the quota at all, few
    /// enough items have tried in this pass, and some workload of lower priority holds pods or
    /// some pod is being freed.
    pub(super) fn may_preempt(
        &self,
        item: &Item,
        misfit: &Misfit,
        attempts: u32,
        floor: Floor,
    ) -> bool {
        self.queue.preemption.within_queue == WithinQueue::LowerPriority
            && item.kind == ItemKind::Ordered
            && misfit.needed <= misfit.limit
            && attempts < MAX_PREEMPTION_ATTEMPTS
            && (floor.terminating || floor.lowest.is_some_and(|p| p < item.priority))
    }

    /// What may be taken back in this queue at all, computed once per pass: the lowest priority
    /// of a workload holding pods, and whether any pod is terminating.
    pub(super) fn floor(&self) -> Floor {
        let mut floor = Floor::default();
        if self.queue.preemption.within_queue == WithinQueue::Never {
            return floor;
        }
        for (m, &w) in self.members.iter().enumerate() {
            let state = &self.states[m];
            floor.terminating |= state.terminating > 0;
            if state.admitted_before > 0 {
                let priority = self.snapshot.workloads[w].priority;
                floor.lowest = Some(floor.lowest.map_or(priority, |l| l.min(priority)));
            }
        }
        floor
    }

    /// Looks for victims for an item that does not fit ([`preemption::plan`]). With a plan, its
    /// evictions are recorded (the item stays waiting: a later pass admits it once the victims
    /// are gone), the room it is promised is held from the items after it (added to the queue's
    /// reservations until the end of the pass), and the preemptor's workload and those that lose
    /// pods or have pods terminating are frozen for the rest of the pass.
    pub(super) fn try_preemption(
        &mut self,
        item: &Item,
        admitted_now: &[PodRef],
        evict: &mut Vec<Eviction>,
    ) -> Option<InForce> {
        let width = self.width;
        let mut load = self.arena.slice(self.usage_at, width).to_vec();
        add_into(&mut load, self.arena.slice(self.reserved_at, width));
        let mut need = self.arena.slice(item.usage, width).to_vec();
        add_into(&mut need, self.arena.slice(self.reserve_at, width));
        // The preemptor's own pods count as admitted: a workload of the preemptor whose pods are
        // terminating keeps its reservation for them once they are gone. Not so for the gang of
        // a workload that has stopped (its admitted pods all terminating): the item carries the
        // whole gang's places, and its terminating pods free all they hold.
        let start = item.pods_start as usize;
        let item_pods = &self.arena.pods[start..start + item.pods_len as usize];
        let preemptor = &self.snapshot.workloads[self.members[item.member as usize]];
        let own = if preemptor.has_started() {
            item_pods
        } else {
            &[][..]
        };
        let (holders, owners) = self.holders(item.priority, admitted_now.iter().chain(own));
        let need = Need {
            limits: &self.dims.limits,
            load: &load,
            item: &need,
        };
        let plan = preemption::plan(&need, &holders)?;
        let in_force = self.in_force(item, &plan, &owners, &load, evict);
        let reserved_at = self.reserved_at;
        add_into(self.arena.slice_mut(reserved_at, width), &in_force.hold);
        Some(in_force)
    }

    /// The members that hold admitted pods, as the planner sees them, and each one's member index.
    /// `admitted_now`: the pods admitted by the pass so far (and the preemptor's).
    pub(super) fn holders<'p>(
        &self,
        priority: i32,
        admitted_now: impl Iterator<Item = &'p PodRef>,
    ) -> (Vec<Holder>, Vec<usize>) {
        let mut now: HashMap<(usize, usize), u32> = HashMap::new();
        for r in admitted_now {
            *now.entry((r.workload, r.pod_set)).or_default() += 1;
        }
        let (mut holders, mut owners) = (Vec::new(), Vec::new());
        for (m, &w) in self.members.iter().enumerate() {
            let state = self.states[m];
            if state.admitted_before == 0 {
                continue;
            }
            let workload = &self.snapshot.workloads[w];
            let sets = workload
                .pod_sets
                .iter()
                .enumerate()
                .map(|(s, set)| HeldSet {
                    min_count: set.min_count,
                    per_pod: self.dims.project_in(&set.per_pod, self.set_flavor(set)),
                    admitted_now: now.get(&(w, s)).copied().unwrap_or(0),
                    pods: self.held_pods(set),
                })
                .collect();
            holders.push(Holder {
                priority: workload.priority,
                queued_at: workload.queued_at,
                may_be_victim: workload.priority < priority && state.admitted_now == 0,
                sets,
            });
            owners.push(m);
        }
        (holders, owners)
    }

    pub(super) fn held_pods(&self, set: &PodSetSnapshot) -> Vec<HeldPod> {
        set.pods
            .iter()
            .enumerate()
            .filter(|(_, pod)| pod.state == PodState::Admitted)
            .map(|(index, pod)| HeldPod {
                index,
                requests: self
                    .dims
                    .project_in(&pod.requests, usize::from(flavor_index(self.queue, pod))),
                created_at: pod.created_at,
                terminating: pod.terminating,
                blocked: pod.eviction_blocked,
            })
            .collect()
    }

    /// A plan put in force: its evictions, the room held for the preemptor (what it will take
    /// beyond what the queue holds now), the frozen members and the preemptor's reason to wait
    /// (the victims chosen now and the lower-priority pods already terminating; none when only
    /// other pods being freed make its room).
    pub(super) fn in_force(
        &self,
        item: &Item,
        plan: &Plan,
        owners: &[usize],
        load: &[i64],
        evict: &mut Vec<Eviction>,
    ) -> InForce {
        let preemptor = self.members[item.member as usize];
        let mut frozen: Vec<bool> = self.states.iter().map(|s| s.terminating > 0).collect();
        // Its own later pods would take the gang places its plan counted on.
        frozen[item.member as usize] = true;
        for victim in &plan.victims {
            let m = owners[victim.holder];
            frozen[m] = true;
            evict.push(Eviction {
                victim: PodRef {
                    workload: self.members[m],
                    pod_set: victim.set,
                    pod: victim.pod,
                },
                preemptor,
                reason: EvictionReason::InQueuePriority,
            });
        }
        let terminating: u32 = (self.members.iter().zip(&self.states))
            .filter(|(w, _)| self.snapshot.workloads[**w].priority < item.priority)
            .map(|(_, s)| s.terminating)
            .sum();
        let victims = to_u32(plan.victims.len()).saturating_add(terminating);
        InForce {
            hold: (plan.after.iter().zip(load))
                .map(|(after, now)| after.saturating_sub(*now).max(0))
                .collect(),
            frozen,
            reason: (victims > 0).then(|| WaitReason::Preempting {
                queue: self.queue.name.clone(),
                victims,
            }),
        }
    }
}

package chartcheck

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// A rule is one policy the chart must keep, whatever its values: check
// returns what breaks it in the rendered objects. Each rule has a values
// file in testdata/break that breaks it, and TestRuleBreaks sees it fail
// there.
type rule struct {
	name  string
	check func(objs []Object, wk wellKnown) []string
}

var rules = []rule{
	{"probes", checkProbes},
	{"shutdown", checkShutdown},
	{"disruption", checkDisruption},
	{"resources", checkResources},
	{"security", checkSecurity},
	{"secrets", checkSecrets},
	{"network", checkNetwork},
	{"autoscaling", checkAutoscaling},
}

// leveeComponents run Levee's own servers (gRPC health on the metrics port).
var leveeComponents = []string{"gateway", "verifier", "budgetd"}

// minLivenessSilence is how long a liveness probe must tolerate no answer
// before the kubelet restarts the container: longer than a pause or a
// throttled moment under load.
const minLivenessSilence = 20 * time.Second

func seconds(n int32) time.Duration { return time.Duration(n) * time.Second }

// Probes: no exec anywhere (the image has no shell); Levee's servers are
// probed with gRPC health on their metrics port, liveness on the liveness
// service (never waits for a worker), readiness on the readiness service
// (false only while starting or draining), and liveness tolerates
// minLivenessSilence.
func checkProbes(objs []Object, wk wellKnown) []string {
	var bad []string
	for _, w := range Workloads(objs) {
		for _, c := range w.Pod.Spec.Containers {
			where := fmt.Sprintf("%s container %s", w.Object, c.Name)
			for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
				if p != nil && p.Exec != nil {
					bad = append(bad, fmt.Sprintf("%s: %s probe runs a command, and the image has no shell", where, name))
				}
			}
			if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Exec != nil {
				bad = append(bad, where+": preStop runs a command, and the image has no shell")
			}
			if w.Object.GVK.Kind == "Job" {
				continue
			}
			if c.LivenessProbe == nil || c.ReadinessProbe == nil {
				bad = append(bad, where+": liveness and readiness probes are both required")
				continue
			}
			if l := c.LivenessProbe; seconds(l.PeriodSeconds)*time.Duration(l.FailureThreshold) < minLivenessSilence || l.TimeoutSeconds < 1 {
				bad = append(bad, fmt.Sprintf("%s: liveness restarts after %d × %ds without an answer (timeout %ds); under load that restarts the pods most needed: at least %v",
					where, l.FailureThreshold, l.PeriodSeconds, l.TimeoutSeconds, minLivenessSilence))
			}
			if !slices.Contains(leveeComponents, w.Component()) {
				continue
			}
			metrics := wk.port(w.Component()) + wk.metricsOffset
			for _, p := range []struct {
				name, service string
				probe         *corev1.Probe
			}{{"liveness", wk.probeLiveness, c.LivenessProbe}, {"readiness", wk.probeReadiness, c.ReadinessProbe}, {"startup", wk.probeLiveness, c.StartupProbe}} {
				if p.probe == nil || p.probe.GRPC == nil || p.probe.GRPC.Port != int32(metrics) || p.probe.GRPC.Service == nil || *p.probe.GRPC.Service != p.service {
					bad = append(bad, fmt.Sprintf("%s: the %s probe must be gRPC health on the metrics port %d, service %q", where, p.name, metrics, p.service))
				}
			}
		}
	}
	return bad
}

// Shutdown: Levee's servers sleep in preStop (the kubelet's sleep action)
// so that endpoints forget them first, and their grace period covers the
// sleep plus the drain their flags allow.
func checkShutdown(objs []Object, _ wellKnown) []string {
	var bad []string
	for _, w := range Workloads(objs) {
		if !slices.Contains(leveeComponents, w.Component()) {
			continue
		}
		for _, c := range w.Pod.Spec.Containers {
			where := fmt.Sprintf("%s container %s", w.Object, c.Name)
			if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 1 {
				bad = append(bad, where+": preStop must be the kubelet's sleep action, at least 1s")
				continue
			}
			sleep := seconds(int32(c.Lifecycle.PreStop.Sleep.Seconds))
			var drain time.Duration
			switch w.Component() {
			case "verifier":
				drain = durationArg(c.Args, "drain-timeout", 30*time.Second)
			case "gateway":
				drain = durationArg(c.Args, "max-deadline", 30*time.Second)
			case "budgetd":
				drain = 5 * time.Second // resign, then stop within shutdownGrace (2s)
			}
			grace := 30 * time.Second
			if g := w.Pod.Spec.TerminationGracePeriodSeconds; g != nil {
				grace = seconds(int32(*g))
			}
			if grace < sleep+drain {
				bad = append(bad, fmt.Sprintf("%s: terminationGracePeriodSeconds %v does not cover the preStop sleep %v and the drain %v: the kubelet kills calls in flight",
					where, grace, sleep, drain))
			}
		}
	}
	return bad
}

func durationArg(args []string, name string, def time.Duration) time.Duration {
	v, ok := Arg(args, name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return time.Hour // unparseable: no grace period covers it
	}
	return d
}

// Disruption: every Deployment and StatefulSet has one PodDisruptionBudget
// selecting its pods that allows a voluntary disruption (a node drain must
// be able to proceed), and etcd's never allows losing quorum.
func checkDisruption(objs []Object, _ wellKnown) []string {
	var bad []string
	var pdbs []*policyv1.PodDisruptionBudget
	for _, o := range Find(objs, "PodDisruptionBudget", "") {
		pdbs = append(pdbs, o.Typed.(*policyv1.PodDisruptionBudget))
	}
	for _, w := range Workloads(objs) {
		if w.Object.GVK.Kind == "Job" {
			continue
		}
		var mine []*policyv1.PodDisruptionBudget
		for _, p := range pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err == nil && sel.Matches(labels.Set(w.Pod.Labels)) {
				mine = append(mine, p)
			}
		}
		if len(mine) != 1 {
			bad = append(bad, fmt.Sprintf("%s: %d PodDisruptionBudgets select its pods, want 1", w.Object, len(mine)))
			continue
		}
		p := mine[0]
		replicas := int(ptrOr(w.Replicas, 1))
		if w.Replicas == nil { // sized by the autoscaler: its floor
			replicas = hpaMin(objs, w.Object.Name)
		}
		if p.Spec.MinAvailable != nil || p.Spec.MaxUnavailable == nil {
			bad = append(bad, fmt.Sprintf("%s: its PodDisruptionBudget must set maxUnavailable (minAvailable blocks drains when the count changes)", w.Object))
			continue
		}
		maxU, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MaxUnavailable, replicas, true)
		if err != nil || maxU < 1 {
			bad = append(bad, fmt.Sprintf("%s: its PodDisruptionBudget allows no disruption (maxUnavailable %s of %d): node drains would hang", w.Object, p.Spec.MaxUnavailable, replicas))
		}
		if w.Component() == "etcd" && maxU > (replicas-1)/2 {
			bad = append(bad, fmt.Sprintf("%s: maxUnavailable %d of %d members can lose etcd's quorum", w.Object, maxU, replicas))
		}
	}
	return bad
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func hpaMin(objs []Object, target string) int {
	for _, o := range Find(objs, "HorizontalPodAutoscaler", "") {
		h := o.Typed.(*autoscalingv2.HorizontalPodAutoscaler)
		if h.Spec.ScaleTargetRef.Name == target {
			return int(ptrOr(h.Spec.MinReplicas, 1))
		}
	}
	return 1
}

// verifierHeadroom is what a verifier needs beyond 2 × workers × m for
// -memory-budget auto to admit one hash per worker (pkg/residentheap).
var verifierHeadroom = resource.MustParse("192Mi")

// Resources: every container has CPU and memory requests and a memory
// limit equal to its request; a verifier's CPU is its -workers, and its
// memory at least 2 × workers × Argon2 memory + 192 MiB.
func checkResources(objs []Object, _ wellKnown) []string {
	var bad []string
	for _, w := range Workloads(objs) {
		for _, c := range w.Pod.Spec.Containers {
			where := fmt.Sprintf("%s container %s", w.Object, c.Name)
			req, lim := c.Resources.Requests, c.Resources.Limits
			if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() {
				bad = append(bad, where+": CPU and memory requests and a memory limit are required")
				continue
			}
			if req.Memory().Cmp(*lim.Memory()) != 0 {
				bad = append(bad, fmt.Sprintf("%s: memory request %s ≠ limit %s: the pod may be OOM-killed for memory it was promised", where, req.Memory(), lim.Memory()))
			}
			if w.Component() != "verifier" {
				continue
			}
			workers, err1 := strconv.Atoi(argOr(c.Args, "workers", "0"))
			mKiB, err2 := strconv.ParseInt(argOr(c.Args, "argon2-memory-kib", "65536"), 10, 64)
			if err1 != nil || err2 != nil || workers < 1 {
				bad = append(bad, where+": -workers and -argon2-memory-kib must be given as numbers")
				continue
			}
			cpu := resource.NewQuantity(int64(workers), resource.DecimalSI)
			if req.Cpu().Cmp(*cpu) != 0 || lim.Cpu().Cmp(*cpu) != 0 {
				bad = append(bad, fmt.Sprintf("%s: CPU request %s and limit %s must be -workers=%d cores", where, req.Cpu(), lim.Cpu(), workers))
			}
			need := resource.NewQuantity(2*int64(workers)*mKiB<<10, resource.BinarySI)
			need.Add(verifierHeadroom)
			if lim.Memory().Cmp(*need) < 0 {
				bad = append(bad, fmt.Sprintf("%s: memory %s is under 2 × %d workers × %d KiB + %s = %s: -memory-budget auto would admit fewer hashes than workers",
					where, lim.Memory(), workers, mKiB, &verifierHeadroom, need))
			}
		}
	}
	return bad
}

func argOr(args []string, name, def string) string {
	if v, ok := Arg(args, name); ok {
		return v
	}
	return def
}

// Security: no service-account token, non-root, seccomp RuntimeDefault,
// read-only root filesystem, no privilege escalation, every capability
// dropped, for every pod the chart runs.
func checkSecurity(objs []Object, _ wellKnown) []string {
	var bad []string
	for _, w := range Workloads(objs) {
		ps := w.Pod.Spec.SecurityContext
		if w.Pod.Spec.AutomountServiceAccountToken == nil || *w.Pod.Spec.AutomountServiceAccountToken {
			bad = append(bad, fmt.Sprintf("%s: mounts a service-account token it does not need", w.Object))
		}
		podNonRoot := ps != nil && ps.RunAsNonRoot != nil && *ps.RunAsNonRoot
		podSeccomp := ps != nil && ps.SeccompProfile != nil && ps.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
		if ps != nil && ps.RunAsUser != nil && *ps.RunAsUser == 0 {
			bad = append(bad, fmt.Sprintf("%s: runs as root", w.Object))
		}
		for _, c := range append(slices.Clone(w.Pod.Spec.InitContainers), w.Pod.Spec.Containers...) {
			where := fmt.Sprintf("%s container %s", w.Object, c.Name)
			sc := c.SecurityContext
			if sc == nil {
				bad = append(bad, where+": no security context")
				continue
			}
			if !podNonRoot && (sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot) || sc.RunAsUser != nil && *sc.RunAsUser == 0 {
				bad = append(bad, where+": may run as root")
			}
			if !podSeccomp && (sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
				bad = append(bad, where+": seccomp profile is not RuntimeDefault")
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				bad = append(bad, where+": root filesystem is writable")
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged != nil && *sc.Privileged {
				bad = append(bad, where+": may escalate privileges")
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
				bad = append(bad, where+": capabilities are not all dropped")
			}
		}
	}
	return bad
}

// Secrets: each component mounts only its own Secret; no two components
// share one (a verifier must not hold the gateway's key).
func checkSecrets(objs []Object, _ wellKnown) []string {
	var bad []string
	owners := map[string][]string{}
	for _, w := range Workloads(objs) {
		var mine []string
		for _, v := range w.Pod.Spec.Volumes {
			if v.Secret != nil {
				mine = append(mine, v.Secret.SecretName)
			}
			if v.Projected != nil {
				for _, s := range v.Projected.Sources {
					if s.Secret != nil {
						mine = append(mine, s.Secret.Name)
					}
				}
			}
		}
		if len(mine) > 1 {
			bad = append(bad, fmt.Sprintf("%s: mounts %d Secrets (%v), want only its own", w.Object, len(mine), mine))
		}
		for _, s := range mine {
			if !slices.Contains(owners[s], w.Component()) {
				owners[s] = append(owners[s], w.Component())
			}
		}
	}
	for s, comps := range owners {
		if len(comps) > 1 {
			slices.Sort(comps)
			bad = append(bad, fmt.Sprintf("Secret %s is mounted by %v: each component must hold only its own key", s, comps))
		}
	}
	return bad
}

// Network: a NetworkPolicy admits to the verifiers' gRPC port only the
// gateways, to budgetd's only budget clients (gateways, budgetd, those
// configured), and to etcd's only Levee's pods; each of them is selected
// by an Ingress policy.
func checkNetwork(objs []Object, wk wellKnown) []string {
	var bad []string
	var nps []*networkingv1.NetworkPolicy
	for _, o := range Find(objs, "NetworkPolicy", "") {
		nps = append(nps, o.Typed.(*networkingv1.NetworkPolicy))
	}
	allowed := map[string][]string{
		"verifier": {"gateway"},
		"budgetd":  {"gateway", "budgetd"},
		"etcd":     {"gateway", "verifier", "budgetd", "etcd-auth", "etcd"},
	}
	ports := map[string]int{"verifier": wk.port("verifier"), "budgetd": wk.port("budgetd"), "etcd": wk.etcdClientPort}
	for _, w := range Workloads(objs) {
		comp := w.Component()
		want, guarded := allowed[comp]
		if !guarded {
			continue
		}
		var mine []*networkingv1.NetworkPolicy
		for _, np := range nps {
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err == nil && sel.Matches(labels.Set(w.Pod.Labels)) && slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
				mine = append(mine, np)
			}
		}
		if len(mine) == 0 {
			bad = append(bad, fmt.Sprintf("%s: no NetworkPolicy guards its pods: anyone in the cluster reaches port %d", w.Object, ports[comp]))
			continue
		}
		for _, np := range mine {
			for _, r := range np.Spec.Ingress {
				if !rulePort(r, ports[comp]) {
					continue
				}
				if len(r.From) == 0 {
					bad = append(bad, fmt.Sprintf("NetworkPolicy %s admits anyone to %s's port %d", np.Name, comp, ports[comp]))
				}
				for _, peer := range r.From {
					from := peerComponent(peer, w.Pod.Labels["app.kubernetes.io/instance"])
					if comp == "budgetd" && from == "" {
						continue // budgetClients: peers the operator named
					}
					if !slices.Contains(want, from) {
						bad = append(bad, fmt.Sprintf("NetworkPolicy %s admits %s to %s's port %d; only %v may", np.Name, peerString(peer), comp, ports[comp], want))
					}
				}
			}
		}
	}
	return bad
}

// rulePort reports whether an ingress rule covers port (a rule without
// ports covers all).
func rulePort(r networkingv1.NetworkPolicyIngressRule, port int) bool {
	if len(r.Ports) == 0 {
		return true
	}
	for _, p := range r.Ports {
		if p.Port == nil || p.Port.Type == intstr.Int && int(p.Port.IntVal) == port ||
			p.EndPort != nil && p.Port.Type == intstr.Int && int(p.Port.IntVal) <= port && port <= int(*p.EndPort) {
			return true
		}
	}
	return false
}

// peerComponent is the Levee component of this release a peer selects
// exactly, or "" for any other peer.
func peerComponent(p networkingv1.NetworkPolicyPeer, instance string) string {
	if p.PodSelector == nil || p.NamespaceSelector != nil || p.IPBlock != nil || len(p.PodSelector.MatchExpressions) > 0 {
		return ""
	}
	l := p.PodSelector.MatchLabels
	if l["app.kubernetes.io/name"] != "levee" || l["app.kubernetes.io/instance"] != instance {
		return ""
	}
	return l["app.kubernetes.io/component"]
}

func peerString(p networkingv1.NetworkPolicyPeer) string {
	var s []string
	if p.PodSelector != nil {
		s = append(s, "pods "+metav1.FormatLabelSelector(p.PodSelector))
	}
	if p.NamespaceSelector != nil {
		s = append(s, "namespaces "+metav1.FormatLabelSelector(p.NamespaceSelector))
	}
	if p.IPBlock != nil {
		s = append(s, "addresses "+p.IPBlock.CIDR)
	}
	return strings.Join(s, " in ")
}

// Autoscaling: when the verifiers autoscale, one HorizontalPodAutoscaler
// sizes their Deployment (which then sets no replicas of its own) on one
// metric: the verifiers' demand ratio, which they export (pkg/wellknown),
// averaged per pod, with a target below 1.
func checkAutoscaling(objs []Object, wk wellKnown) []string {
	var bad []string
	hpas := Find(objs, "HorizontalPodAutoscaler", "")
	for _, w := range Workloads(objs) {
		if w.Component() != "verifier" || w.Object.GVK.Kind != "Deployment" {
			continue
		}
		var mine []*autoscalingv2.HorizontalPodAutoscaler
		for _, o := range hpas {
			h := o.Typed.(*autoscalingv2.HorizontalPodAutoscaler)
			if h.Spec.ScaleTargetRef.Kind == "Deployment" && h.Spec.ScaleTargetRef.Name == w.Object.Name {
				mine = append(mine, h)
			}
		}
		if len(mine) == 0 {
			continue // a fixed fleet (verifier.autoscaling.enabled: false)
		}
		if w.Replicas != nil {
			bad = append(bad, fmt.Sprintf("%s sets replicas and is autoscaled: every upgrade would reset the autoscaler's count", w.Object))
		}
		for _, h := range mine {
			if len(h.Spec.Metrics) != 1 {
				bad = append(bad, fmt.Sprintf("HorizontalPodAutoscaler %s: %d metrics, want only %s", h.Name, len(h.Spec.Metrics), wk.demandMetric))
				continue
			}
			m := h.Spec.Metrics[0]
			if m.Type != autoscalingv2.PodsMetricSourceType || m.Pods == nil || m.Pods.Metric.Name != wk.demandMetric {
				bad = append(bad, fmt.Sprintf("HorizontalPodAutoscaler %s scales on %s, want the verifiers' %s (demand ÷ capacity, not queue depth or CPU)",
					h.Name, metricName(m), wk.demandMetric))
				continue
			}
			if !wk.verifierExports(m.Pods.Metric.Name) {
				bad = append(bad, fmt.Sprintf("HorizontalPodAutoscaler %s: %s is not in pkg/wellknown's VerifierMetrics", h.Name, m.Pods.Metric.Name))
			}
			t := m.Pods.Target
			if t.Type != autoscalingv2.AverageValueMetricType || t.AverageValue == nil || t.AverageValue.Cmp(resource.MustParse("1")) >= 0 || t.AverageValue.Sign() <= 0 {
				bad = append(bad, fmt.Sprintf("HorizontalPodAutoscaler %s: the target must be an average value between 0 and 1", h.Name))
			}
		}
	}
	return bad
}

func metricName(m autoscalingv2.MetricSpec) string {
	switch {
	case m.Pods != nil:
		return string(m.Type) + " " + m.Pods.Metric.Name
	case m.Resource != nil:
		return string(m.Type) + " " + m.Resource.Name.String()
	case m.External != nil:
		return string(m.Type) + " " + m.External.Metric.Name
	case m.Object != nil:
		return string(m.Type) + " " + m.Object.Metric.Name
	}
	return string(m.Type)
}

// breakFile is the values file that breaks rule r.
func breakFile(r rule) string { return filepath.Join("testdata", "break", r.name+".yaml") }

package chartcheck

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// Workload is a pod template the chart renders, with what owns it.
type Workload struct {
	Object   Object
	Replicas *int32 // nil for a Job, or a Deployment an autoscaler sizes
	Pod      corev1.PodTemplateSpec
}

// Component is the pod's app.kubernetes.io/component label.
func (w Workload) Component() string { return w.Pod.Labels["app.kubernetes.io/component"] }

// Workloads returns every Deployment, StatefulSet and Job.
func Workloads(objs []Object) []Workload {
	var out []Workload
	for _, o := range objs {
		switch v := o.Typed.(type) {
		case *appsv1.Deployment:
			out = append(out, Workload{Object: o, Replicas: v.Spec.Replicas, Pod: v.Spec.Template})
		case *appsv1.StatefulSet:
			out = append(out, Workload{Object: o, Replicas: v.Spec.Replicas, Pod: v.Spec.Template})
		case *batchv1.Job:
			out = append(out, Workload{Object: o, Pod: v.Spec.Template})
		}
	}
	return out
}

// Arg returns the value of the last -name=value (or -name value) in args,
// as Go's flag package would read it, and whether there was one.
func Arg(args []string, name string) (string, bool) {
	val, found := "", false
	for i := 0; i < len(args); i++ {
		a := strings.TrimPrefix(strings.TrimPrefix(args[i], "-"), "-")
		if a == args[i] {
			continue // not a flag
		}
		if k, v, ok := strings.Cut(a, "="); ok {
			if k == name {
				val, found = v, true
			}
			continue
		}
		if a == name && i+1 < len(args) {
			val, found = args[i+1], true
			i++
		}
	}
	return val, found
}

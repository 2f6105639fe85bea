// Package budgetstatus renders the fleet-wide retry budget's status (a
// levee.budget.v1 StatusResponse) for people: as tables, or as JSON with
// the proto's field names and every field present. It is the one renderer
// behind budgetd's status page, `budgetd status` and `levee status`; it
// depends on the wire messages alone, so that budgetd can serve it without
// linking the operator's command-line code.
package budgetstatus

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
)

// Write writes resp as readable tables (the leader, every key with its
// settings and totals, every client, the configuration errors), or as JSON
// (proto field names, every field present).
func Write(w io.Writer, resp *budgetv1.StatusResponse, asJSON bool) error {
	if asJSON {
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true, EmitUnpopulated: true}.Marshal(resp)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var sb strings.Builder
	if resp.GetLeader() == "" {
		fmt.Fprintf(&sb, "leader:  none (clients use their local fallback budgets)\n")
	} else {
		fmt.Fprintf(&sb, "leader:  %s\n", resp.GetLeader())
	}
	fmt.Fprintf(&sb, "replica: %s\n\n", resp.GetReplica())

	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	if len(resp.GetBudgets()) == 0 {
		fmt.Fprintln(tw, "no budgets yet")
	} else {
		fmt.Fprintln(tw, "KEY\tRATIO\tBURST\tMIN/S\tTOKENS\tFIRST/S\tRETRIES/S\tRETRY RATIO\tGRANTED\tDENIED\tCLIENTS")
		for _, b := range resp.GetBudgets() {
			st := b.GetSettings()
			fmt.Fprintf(tw, "%s\t%g\t%g\t%g\t%.1f\t%.1f\t%.1f\t%.3f\t%d\t%d\t%d\n", b.GetKey(),
				st.GetRatio(), st.GetBurst(), st.GetMinPerSecond(), b.GetTokensAvailable(),
				b.GetFirstAttemptsPerSecond(), b.GetRetriesPerSecond(), b.GetRetryRatio(),
				b.GetTokensGrantedTotal(), b.GetTokensDeniedTotal(), len(b.GetClients()))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, b := range resp.GetBudgets() {
		if len(b.GetClients()) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "\nclients of %s:\n", b.GetKey())
		tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  CLIENT\tHAS\tWANTS\tFIRST/S\tSINCE REPORT")
		for _, c := range b.GetClients() {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%.1f\t%v\n", c.GetClientId(), c.GetHas(), c.GetWants(),
				c.GetFirstAttemptsPerSecond(), c.GetSinceReport().AsDuration().Round(time.Millisecond))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if errs := resp.GetConfigErrors(); len(errs) > 0 {
		fmt.Fprintf(&sb, "\nconfig errors:\n")
		for _, e := range errs {
			fmt.Fprintf(&sb, "  %s\n", e)
		}
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// Package architecture holds the test that keeps docs/architecture.md true
// to the code: the picture of Levee's packages and their imports, the lab
// module's beside the product's, is generated from `go list`, and the rules
// it states (no server package imports another; no operator tool imports a
// server; no product binary compiles the lab or a plotting package; no
// product package imports the lab) are checked on every test run. It has no
// code of its own.
package architecture

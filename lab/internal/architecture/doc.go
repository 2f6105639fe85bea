// Package architecture holds the lab module's rules, checked on every test
// run: no lab package that a binary is built from imports one of the
// product's servers (the lab speaks to a fleet over its wire APIs), and
// every metric and flag name the lab shares with the product comes from
// package wellknown, whose names the product's own tests check. It has no
// code of its own.
package architecture

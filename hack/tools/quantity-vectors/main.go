// Command quantity-vectors prints, as JSON, how Kubernetes reads each of a table of resource
// quantities, for the unit test of sluice's parse_quantity (src/queue/resources.rs).
//
// Regenerate (from the repository root):
//
//	export GOMODCACHE=$HOME/.cache/sluice/go/mod GOCACHE=$HOME/.cache/sluice/go/build \
//	  GOPATH=$HOME/.cache/sluice/go GOFLAGS=-mod=mod GOTOOLCHAIN=local
//	(cd hack/tools/quantity-vectors && /usr/local/go/bin/go run .) > src/resources/testdata/quantity_vectors.json
//
// k8s.io/apimachinery is pinned in go.mod to the cluster's Kubernetes (hack/versions.sh).
//
// Each input is read as Quantity.UnmarshalJSON and UnmarshalCBOR read a quantity from an object:
// ParseQuantity(strings.TrimSpace(input)). "milli" is what sluice must return: the value in
// milli-units, its magnitude rounded up, or "too large" when that does not fit an int64.
//
// ParseQuantity takes minutes on a few inputs (a huge negative decimal exponent makes it build
// 10^|exponent| to round to nano-units). Each input is parsed in a child process with a time limit;
// an input that runs out of time is evaluated through an equivalent the table names, and the JSON
// says so ("slow_in_kubernetes", "evaluated_as").
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"os"
	"os/exec"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// childLimit is how long one ParseQuantity may take before its equivalent is used.
const childLimit = 5 * time.Second

type testCase struct {
	input string
	// equivalent is parsed instead when input takes longer than childLimit: an input Kubernetes
	// reads as the same quantity, cheaply.
	equivalent string
}

// Vector is one line of the output.
type Vector struct {
	Input            string `json:"input"`
	Valid            bool   `json:"valid"`
	Error            string `json:"error,omitempty"`
	Canonical        string `json:"canonical,omitempty"`
	Milli            string `json:"milli,omitempty"`
	SlowInKubernetes bool   `json:"slow_in_kubernetes,omitempty"`
	EvaluatedAs      string `json:"evaluated_as,omitempty"`
}

func cases() []testCase {
	plain := []string{
		// Ordinary.
		"0", "1", "4", "500m", "1.5", "2k", "100M", "8Gi", "1.5Gi", "0.5Gi", "1Ki", "1Mi", "1Ti", "1Pi",
		"1Ei", "7Ei", "8Ei", "16Ei", "1e3", "1E3", "1e+3", "1e-3", "1e-4", "1E", "1P", "1T", "1G",
		"1n", "1u", "0.1m", "1.1m", "999n", "1000n", "1001n", "-1n", "-0.1m",
		// Signs and zeros.
		"+1", "-1", "-1000", "-0", "+0", "00", "000.000", "-00", "0.0", "--1", "+-1", "-+1", "++1",
		"+", "-", ".", "-.", "+.", "1-", "1+",
		// Points.
		".5", "5.", "5.m", ".5m", "1.2.3", "1..2", "..", "5.Gi", ".5Gi", ".Gi", ".Ti", ".Pi", ".Ei",
		"Ki", "Pi", "-Ei", "m", "k", "E",
		// Exponents.
		"e3", "E3", "1e", "1E", "1e+", "1e-", "1e3.5", "1e03", "1e-0", "1e+0", "1ee3", "1eE3",
		"1e3e3", "1e-9", "1e-10", "1e-12", "e-10", ".e-10", "-e-10", "0e-10", "0.e-10",
		"1e18", "9e18", "1e19", "1e15", "1e16", "9.223372036854775807e15", "9.223372036854775808e15",
		"0e2000000000", "1e2000000000", "0e-2000000000", "-0e2000000000",
		"1e2147483647", "1e4294967296",
		"1e4294967297", "1e-4294967296", "1e9223372036854775807",
		"1e9223372036854775808", "1e-9223372036854775808", "1e-9223372036854775809",
		"1e99999999999999999999", "1e-20000000", "1.5e-2147483648", "0.5e-2147483648",
		"1.5e2147483648",
		// Suffixes.
		"1Ki.5", "1Ki5", "1K", "1ki", "1KI", "1kI", "1mi", "1Gi1", "1Mi-1", "1 Gi", "1Gi ", " 1Gi",
		"1i", "1x", "1nm", "1mm", "1.5e3Gi", "1Gie3", "1m3", "1k-2", "1e3Ki",
		// Not ASCII, not numbers.
		"１", "1０", "٣", "1µ", "abc", "", " ", "0x10", "1_000", "1,5", "∞", "NaN", "inf", "1/2",
		"\t1\n", "\u00a01", "1\u00a0", "1\u2028", "\u00851", "1\x00",
		// int64 edges (in units; sluice counts milli-units).
		"9223372036854775807", "9223372036854775808", "-9223372036854775808",
		"9223372036854775807m", "9223372036854775808m", "-9223372036854775807m",
		"-9223372036854775808m", "-9223372036854775809m", "9223372036854775.807", "9223372036854775.8075",
		"9223372036854775.808", "9223372036854775807n", "8191Pi", "8192Pi", "8388607Ti", "8388608Ti",
		"8Ei", "7.999999999Ei", "0.001Ki", "0.0001Ki", "1.0000000001Ki", "123456789012345678",
		"1234567890123456789", "12345678901234567.89", "0.123456789012345678", "1.23456789012345678",
		"0.0000000001", "-0.0000000001",
	}
	var list []testCase
	for _, s := range plain {
		list = append(list, testCase{input: s})
	}
	// Huge digit strings: the request body bounds them, nothing else does.
	long := strings.Repeat("9", 400)
	list = append(list,
		testCase{input: long},
		testCase{input: "0." + strings.Repeat("0", 1000) + "1"},
		testCase{input: strings.Repeat("0", 1000) + "1"},
		testCase{input: "1" + strings.Repeat("0", 30) + "e-30"},
		testCase{input: "1" + strings.Repeat("0", 30) + "n"},
		testCase{input: "0." + strings.Repeat("0", 30) + "1e30"},
		testCase{input: "0." + long + "Ei"},
		testCase{input: long + "e-400"},
		testCase{input: long + "e-397"},
		testCase{input: "-" + long + "e-410"},
		testCase{input: "1" + strings.Repeat("0", 5000) + "e-5000"},
		testCase{input: strings.Repeat("1", 10000) + "e-9990"},
	)
	// Inputs ParseQuantity takes minutes on, with exact equivalents it reads quickly. A decimal
	// exponent is parsed as an int64, cut to int32, then moved by the digits after the point in
	// int32 arithmetic that wraps: -2^31 and exponents that reach it become 10^(2^31), not 10^-(2^31).
	list = append(list,
		// Rounds up to the smallest non-zero quantity, 1n, as 1e-100 does.
		testCase{input: "1e-2000000000", equivalent: "1e-100"},
		testCase{input: "-1e-2000000000", equivalent: "-1e-100"},
		testCase{input: "7e-2147483647", equivalent: "1e-100"},
		testCase{input: "1e-2147483647", equivalent: "1e-100"},
		testCase{input: "12e-2147483647", equivalent: "1e-100"},
		testCase{input: "1.5e-2147483639", equivalent: "1e-100"},
		testCase{input: "1.5e-2147483640", equivalent: "1e-100"},
		// -(-2^31) wraps to -2^31: 1 × 10^(2^31).
		testCase{input: "1e-2147483648", equivalent: "10e2147483647"},
		testCase{input: "-1e-2147483648", equivalent: "-10e2147483647"},
		testCase{input: "5e-2147483648", equivalent: "50e2147483647"},
		// 2^31 and 3·2^31 cut to int32 are -2^31.
		testCase{input: "1e2147483648", equivalent: "10e2147483647"},
		testCase{input: "1e6442450944", equivalent: "10e2147483647"},
		// The scale 1 of "1.5" plus 2^31 - 1 wraps to -2^31: 15 × 10^(2^31).
		testCase{input: "1.5e-2147483647", equivalent: "150e2147483647"},
	)
	return list
}

// parse reads input as Quantity.UnmarshalJSON does.
func parse(input string) (resource.Quantity, error) {
	return resource.ParseQuantity(strings.TrimSpace(input))
}

// milli is the quantity in milli-units, its magnitude rounded up, or "too large" beyond int64.
func milli(q resource.Quantity) string {
	dec := q.AsDec() // value = unscaled × 10^-scale
	unscaled := new(big.Int).Set(dec.UnscaledBig())
	shift := 3 - int64(dec.Scale())
	if unscaled.Sign() == 0 {
		return "0"
	}
	if shift > 40 {
		return "too large"
	}
	negative := unscaled.Sign() < 0
	magnitude := unscaled.Abs(unscaled)
	if shift >= 0 {
		magnitude.Mul(magnitude, new(big.Int).Exp(big.NewInt(10), big.NewInt(shift), nil))
	} else {
		divisor := new(big.Int).Exp(big.NewInt(10), big.NewInt(-shift), nil)
		quotient, remainder := new(big.Int).QuoRem(magnitude, divisor, new(big.Int))
		if remainder.Sign() != 0 {
			quotient.Add(quotient, big.NewInt(1))
		}
		magnitude = quotient
	}
	if !magnitude.IsInt64() {
		return "too large"
	}
	if negative {
		magnitude.Neg(magnitude)
	}
	return magnitude.String()
}

// evaluate is the child: it parses one input and prints its Vector.
func evaluate(input string) Vector {
	v := Vector{Input: input}
	q, err := parse(input)
	if err != nil {
		v.Error = err.Error()
		return v
	}
	v.Valid = true
	v.Milli = milli(q)
	// The canonical form of a huge exponent is not worth building.
	if v.Milli != "too large" {
		v.Canonical = q.String()
	}
	return v
}

func inChild(input string) (Vector, error) {
	ctx, cancel := context.WithTimeout(context.Background(), childLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-one")
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.Output()
	if err != nil {
		return Vector{}, err
	}
	var v Vector
	err = json.Unmarshal(out, &v)
	return v, err
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-one" {
		input, err := readAll()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		_ = json.NewEncoder(os.Stdout).Encode(evaluate(input))
		return
	}
	var vectors []Vector
	for _, c := range cases() {
		v, err := inChild(c.input)
		if err != nil {
			if c.equivalent == "" {
				fmt.Fprintf(os.Stderr, "%q: %v (give it an equivalent)\n", c.input, err)
				os.Exit(1)
			}
			v = evaluate(c.equivalent)
			v.Input, v.SlowInKubernetes, v.EvaluatedAs = c.input, true, c.equivalent
		} else if c.equivalent != "" {
			fmt.Fprintf(os.Stderr, "%q: fast now, drop its equivalent\n", c.input)
		}
		vectors = append(vectors, v)
	}
	out, err := json.MarshalIndent(vectors, "", " ")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}

func readAll() (string, error) {
	b, err := io.ReadAll(os.Stdin)
	return string(b), err
}

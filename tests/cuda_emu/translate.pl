#!/usr/bin/perl
# Rewrites one CUDA source of kernels/cuda/ (a .cu or .cuh) into C++ that the CPU emulator compiles
# (tests/cuda_emu/emu.h): usage  perl translate.pl IN OUT. What changes, and nothing else:
#   - namespace kvzip::kernels::cuda[::x] -> kvzip::kernels::cuda_emu[::x] (no clash with the real
#     CUDA objects of a CUDA build, which the same test binary links); the top level one also
#     uses the real namespace's declarations (the constants of kernels/attention.h);
#   - #include "kernels/cuda/X.cuh" -> #include "X.cuh" (the translated copy beside the output);
#   - extern __shared__ T name[];  -> T* name = ::emu::dynamic_shared<T>();
#   - kernel<<<grid, block[, smem[, stream]]>>>(args);  -> ::emu::launch(::emu::LaunchConfig(grid,
#     block[, smem[, stream]]), [&] { kernel(args); });
#   - #ifdef __CUDACC__ -> #if 1 (device-only helpers are compiled for the emulator too).
# Perl because every Debian machine has it (perl-base is essential).
use strict;
use warnings;
my ($in, $out) = @ARGV;
die "usage: translate.pl IN OUT\n" unless defined $out;
open(my $fh, '<', $in) or die "translate.pl: cannot read $in: $!\n";
local $/;
my $s = <$fh>;
close $fh;
my $launches = () = $s =~ /<<</g;
# The top-level namespace also sees the real one's declarations (kernels/attention.h's constants).
$s =~ s/\bnamespace kvzip::kernels::cuda \{/namespace kvzip::kernels::cuda {}\nnamespace kvzip::kernels::cuda_emu {\nusing namespace ::kvzip::kernels::cuda;/g;
$s =~ s/\bnamespace kvzip::kernels::cuda::/namespace kvzip::kernels::cuda_emu::/g;
$s =~ s/::kvzip::kernels::cuda::/::kvzip::kernels::cuda_emu::/g;
$s =~ s{#include "kernels/cuda/(\w+\.cuh)"}{#include "$1"}g;
$s =~ s/extern __shared__ (\w+) (\w+)\[\];/$1* $2 = ::emu::dynamic_shared<$1>();/g;
my $done = ($s =~ s/([\w:]+(?:<[^<>;]*>)?)<<<(.*?)>>>\((.*?)\);/::emu::launch(::emu::LaunchConfig($2), [&] { $1($3); });/gs);
$done = 0 if $done eq '';
die "translate.pl: $in: $launches launches, $done rewritten\n" unless $launches == $done;
$s =~ s/#ifdef __CUDACC__/#if 1/g;
die "translate.pl: $in: __CUDACC__ left\n" if $s =~ /__CUDACC__/;
open(my $oh, '>', "$out.tmp") or die "translate.pl: cannot write $out.tmp: $!\n";
print $oh "// Generated from $in by tests/cuda_emu/translate.pl: do not edit.\n", $s;
close $oh or die "translate.pl: cannot write $out.tmp: $!\n";
rename("$out.tmp", $out) or die "translate.pl: cannot rename to $out: $!\n";

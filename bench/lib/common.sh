# bench/lib/common.sh: shell helpers the bench/ scripts share (sourced).

# median X...: the median of the numbers; of an even count, the mean of
# the middle two
median() {
    printf '%s\n' "$@" | sort -g |
        awk '{a[NR]=$1} END {print NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'
}
